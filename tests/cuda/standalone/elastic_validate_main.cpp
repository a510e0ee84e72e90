// Standalone runner of the elastic-memory CUDA checks alone (tests/cuda/elastic_checks.cpp),
// for a quick GPU run of issue #9's checks: PASS/FAIL per check, exit 0 when all passed.
#include <cstdio>
#include <exception>

#include "backend/cuda/cuda_ops.h"
#include "cuda_checks.h"

int main(int argc, char** argv) {
  using namespace ft::cuda_checks;
  const std::string fixtures = argc > 1 ? argv[1] : FT_FIXTURES;
  if (ft::cuda::device_count() == 0) {
    std::printf("SKIP: %s\n", ft::cuda::device_summary().c_str());
    return 0;
  }
  int failed = 0;
  for (const Check& c : elastic_checks(fixtures)) {
    std::string err;
    try {
      err = c.run();
    } catch (const std::exception& e) {
      err = std::string("exception: ") + e.what() + "\n";
    }
    failed += !err.empty();
    std::printf("%s %s\n%s", err.empty() ? "PASS" : "FAIL", c.name.c_str(), err.c_str());
  }
  return failed ? 1 : 0;
}
