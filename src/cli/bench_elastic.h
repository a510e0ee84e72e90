// ft bench elastic (bench_elastic.cpp): live resizes of the CUDA runner's expert slot pool and
// KV on a synthetic Qwen3-30B-A3B-shaped model; time to apply and decode tokens/s per size.
#pragma once
#include <CLI/CLI.hpp>

namespace ft::cli {

// Adds `elastic` under `ft bench` (a stub that refuses without the CUDA backend).
void add_bench_elastic_command(CLI::App& bench);
// Declares the flags and the callback on `cmd` itself (the standalone bench_elastic binary).
void declare_bench_elastic(CLI::App& cmd);

}  // namespace ft::cli
