// ft bench elastic in a build without the CUDA backend: the command exists and says why not.
#include "base/error.h"
#include "cli/bench_elastic.h"

namespace ft::cli {

void add_bench_elastic_command(CLI::App& bench) {
  bench.add_subcommand("elastic", "Live expert-cache/KV resize timings (needs the CUDA backend)")
      ->allow_extras()
      ->callback([] { fail("ft bench elastic needs the CUDA backend: rebuild with nvcc found"); });
}

}  // namespace ft::cli
