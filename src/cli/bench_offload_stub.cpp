// ft bench offload in a build without the CUDA backend: the command exists and says why not.
#include "base/error.h"
#include "cli/bench_offload.h"

namespace ft::cli {

void add_bench_offload_command(CLI::App& bench) {
  bench.add_subcommand("offload", "Expert offload on the GPU (needs the CUDA backend)")
      ->allow_extras()
      ->callback([] { fail("ft bench offload needs the CUDA backend: rebuild with nvcc found"); });
}

}  // namespace ft::cli
