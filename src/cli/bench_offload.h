// ft bench offload (bench_offload.cpp): expert offload on the CUDA runner at several VRAM
// budgets. Built only with the CUDA backend.
#pragma once
#include <CLI/CLI.hpp>

#include <cstdint>
#include <vector>

namespace ft {
class CudaTransformer;
}

namespace ft::cli {

// One greedy decode step of sequence 0 at pos: the next id, found on the device
// (FT_DEVICE_ARGMAX=0: the logits row copied back into `logits` and scanned on the host, for
// A/B runs). Shared by the offload and bandwidth benches.
int32_t greedy_step(CudaTransformer& tf, int32_t id, int64_t pos, std::vector<float>& logits);

// Adds `offload` under `ft bench`.
void add_bench_offload_command(CLI::App& bench);
// Declares the flags and the callback on `cmd` itself (the standalone bench_offload binary).
void declare_bench_offload(CLI::App& cmd);

}  // namespace ft::cli
