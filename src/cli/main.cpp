// ft entry point: builds the command tree, runs the chosen command, turns errors into one line.
#include <cstdio>

#include <string>

#include "backend/cpu/kernels.h"
#include "backend/cuda/cuda_ops.h"
#include "base/error.h"
#include "cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"ft: Mixture-of-Experts inference engine", "ft"};
  app.set_version_flag("--version", [] {
    return std::string("ft " FT_VERSION "\ncpu: ") + ft::cpu::kernels().isa +
           "\ncuda: " + ft::cuda::device_summary();
  });
  app.require_subcommand(1);
  ft::cli::add_logits_command(app);
  ft::cli::add_run_command(app);
  ft::cli::add_bench_command(app);
  ft::cli::add_tokenize_command(app);
  ft::cli::add_perplexity_command(app);
  ft::cli::add_serve_command(app);
  ft::cli::add_quantize_command(app);
  ft::cli::add_ctl_command(app);
  ft::cli::add_checkpoint_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    std::fprintf(stderr, "ft: error: %s (see ft --help)\n", e.what());
    return 2;
  } catch (const ft::Error& e) {
    std::fprintf(stderr, "ft: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ft: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
