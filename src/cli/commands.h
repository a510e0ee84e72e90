// The ft subcommands. Each add_*_command declares its flags once and installs its callback.
#pragma once
#include <CLI/CLI.hpp>

namespace ft::cli {

void add_logits_command(CLI::App& app);    // logits.cpp
void add_run_command(CLI::App& app);       // run.cpp
void add_bench_command(CLI::App& app);     // bench.cpp
void add_tokenize_command(CLI::App& app);  // tokenize.cpp
void add_perplexity_command(CLI::App& app);  // perplexity.cpp
void add_serve_command(CLI::App& app);     // serve.cpp
void add_quantize_command(CLI::App& app);  // quantize.cpp
void add_ctl_command(CLI::App& app);       // ctl.cpp
void add_checkpoint_command(CLI::App& app);  // checkpoint.cpp

}  // namespace ft::cli
