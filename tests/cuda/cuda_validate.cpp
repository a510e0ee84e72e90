// Standalone CUDA validation without gtest (for GPU machines that lack it): runs every check in
// cuda_checks.h, prints PASS/FAIL per check, then decode tokens/s per fixture.
// Usage: cuda_validate [fixtures_dir] [decode_tokens (0: no timing)] [name filter].
// The filter: alternatives separated by '|', each a substring of the name, or with a leading
// '=' the whole name (e.g. "quant_gemv|=mixed_nvfp4_experts"). Exit status 0 when every check
// run passed.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "backend/cuda/cuda_ops.h"
#include "cuda_checks.h"

static bool selected(const std::string& name, const std::string& filter) {
  for (size_t at = 0;;) {
    const size_t bar = filter.find('|', at);
    const std::string alt = filter.substr(at, bar == std::string::npos ? bar : bar - at);
    if (alt.empty() ? filter.empty()
                    : alt[0] == '=' ? name == alt.substr(1) : name.find(alt) != std::string::npos)
      return true;
    if (bar == std::string::npos) return false;
    at = bar + 1;
  }
}

int main(int argc, char** argv) {
  using namespace ft::cuda_checks;
  const std::string fixtures = argc > 1 ? argv[1] : FT_FIXTURES;
  const int decode_tokens = argc > 2 ? std::atoi(argv[2]) : 256;
  const std::string filter = argc > 3 ? argv[3] : "";
  if (ft::cuda::device_count() == 0) {
    std::printf("SKIP: %s\n", ft::cuda::device_summary().c_str());
    return 0;
  }
  std::printf("device: %s\n", ft::cuda::device_summary().c_str());
  int failed = 0, total = 0;
  auto checks = op_checks();
  for (auto& c : runtime_checks()) checks.push_back(c);
  for (auto& c : hybrid_checks(fixtures)) checks.push_back(c);
  for (auto& c : model_checks(fixtures)) checks.push_back(c);
  for (auto& c : quant_checks(fixtures)) checks.push_back(c);
  for (auto& c : elastic_checks(fixtures)) checks.push_back(c);
  for (auto& c : mixed_checks(fixtures)) checks.push_back(c);
  for (auto& c : attention_checks()) checks.push_back(c);
  for (const Check& c : checks) {
    if (!selected(c.name, filter)) continue;
    const auto t0 = std::chrono::steady_clock::now();
    std::string err;
    try {
      err = c.run();
    } catch (const std::exception& e) {
      err = std::string("exception: ") + e.what() + "\n";
    }
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    ++total;
    if (!err.empty()) ++failed;
    std::printf("%s %-32s %8.1f ms\n", err.empty() ? "PASS" : "FAIL", c.name.c_str(), ms);
    if (!err.empty()) std::printf("%.4000s", err.c_str());
    std::fflush(stdout);
  }
  for (const std::string& f : fixture_names()) {
    if (decode_tokens <= 0) break;
    try {
      std::printf("decode %-16s %8.1f tokens/s (%d tokens, batch 1, logits to host each step)\n",
                  f.c_str(), decode_tokens_per_s(fixtures + "/" + f, decode_tokens), decode_tokens);
    } catch (const std::exception& e) {
      std::printf("decode %-16s failed: %s\n", f.c_str(), e.what());
    }
  }
  if (decode_tokens > 0) std::printf("%s", attention_benchmark().c_str());
  if (decode_tokens > 0 || filter.rfind("attention", 0) == 0)
    std::printf("%s", flash_attention_benchmark().c_str());
  if (decode_tokens > 0 || filter.rfind("quant", 0) == 0)
    std::printf("%s", quant_bandwidth().c_str());
  if (decode_tokens > 0 || filter.rfind("overhead", 0) == 0)
    std::printf("%s", gemv_overhead_benchmark().c_str());
  if (decode_tokens > 0 || filter.rfind("hybrid", 0) == 0)
    std::printf("%s", hybrid_benchmark().c_str());
  std::printf("%s: %d/%d checks passed\n", failed ? "FAIL" : "PASS", total - failed, total);
  return failed ? 1 : 0;
}
