// ft bench bw in a build without the CUDA backend: the command exists and says why not.
#include "base/error.h"
#include "cli/bench_bw.h"

namespace ft::cli {

void add_bench_bw_command(CLI::App& bench) {
  bench.add_subcommand("bw", "PCIe and CPU expert bandwidth profile (needs the CUDA backend)")
      ->allow_extras()
      ->callback([] { fail("ft bench bw needs the CUDA backend: rebuild with nvcc found"); });
}

}  // namespace ft::cli
