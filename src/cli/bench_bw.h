// ft bench bw (bench_bw.cpp): host->GPU and CPU expert-kernel bandwidths and the offload vs
// hybrid decode A/B; writes the bandwidth profile. Built only with the CUDA backend.
#pragma once
#include <CLI/CLI.hpp>

namespace ft::cli {

// Adds `bw` under `ft bench`.
void add_bench_bw_command(CLI::App& bench);

}  // namespace ft::cli
