// ft bench offload (bench_offload.cpp): expert offload on the CUDA runner at several VRAM
// budgets. Built only with the CUDA backend.
#pragma once
#include <CLI/CLI.hpp>

namespace ft::cli {

// Adds `offload` under `ft bench`.
void add_bench_offload_command(CLI::App& bench);
// Declares the flags and the callback on `cmd` itself (the standalone bench_offload binary).
void declare_bench_offload(CLI::App& cmd);

}  // namespace ft::cli
