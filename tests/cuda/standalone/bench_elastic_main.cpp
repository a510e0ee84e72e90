// Standalone `ft bench elastic` for GPU machines without the main build's dependencies: the
// same code file (src/cli/bench_elastic.cpp) with its flags on the top-level command.
#include <cstdio>
#include <exception>

#include "cli/bench_elastic.h"

int main(int argc, char** argv) {
  CLI::App app{"ft bench elastic (standalone)"};
  ft::cli::declare_bench_elastic(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
