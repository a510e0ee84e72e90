// Bandwidth profile: path under XDG_CACHE_HOME / HOME, write-read round trip, refusal of a
// corrupt file, the recommendation rule and the --moe-backend auto decision.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>

#include "base/error.h"
#include "experts/bw_profile.h"

namespace ft {
namespace {

namespace fs = std::filesystem;

fs::path temp_dir(const char* name) {
  fs::path d = fs::temp_directory_path() / fmt::format("ft_bw_{}_{}", name, ::getpid());
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// Restores an environment variable on scope exit.
struct EnvGuard {
  std::string name;
  std::optional<std::string> old;
  explicit EnvGuard(const char* n) : name(n) {
    if (const char* v = std::getenv(n)) old = v;
  }
  ~EnvGuard() {
    if (old) ::setenv(name.c_str(), old->c_str(), 1);
    else ::unsetenv(name.c_str());
  }
};

BwEntry entry(double offload_tps, double hybrid_tps) {
  BwEntry e;
  e.pcie_linear_gbs = 52.1;
  e.pcie_gather_gbs = 40;
  e.cpu_expert_gbs = 60;
  e.pcie_overlap_gbs = 30;
  e.cpu_overlap_gbs = 45;
  e.offload_tokens_per_s = offload_tps;
  e.hybrid_tokens_per_s = hybrid_tps;
  e.model = "synthetic";
  e.recommended = recommend_backend(e);
  return e;
}

TEST(BwProfile, PathFollowsXdgThenHome) {
  EnvGuard xdg("XDG_CACHE_HOME"), home("HOME");
  ::setenv("XDG_CACHE_HOME", "/tmp/xdg", 1);
  EXPECT_EQ(bw_profile_path(), "/tmp/xdg/ft/bw_profile.json");
  ::setenv("XDG_CACHE_HOME", "relative/ignored", 1);
  ::setenv("HOME", "/home/u", 1);
  EXPECT_EQ(bw_profile_path(), "/home/u/.cache/ft/bw_profile.json");
  ::unsetenv("XDG_CACHE_HOME");
  EXPECT_EQ(bw_profile_path(), "/home/u/.cache/ft/bw_profile.json");
}

TEST(BwProfile, WriteReadRoundTripKeyedByGpuAndFormat) {
  const fs::path d = temp_dir("rt");
  const std::string path = (d / "deep" / "bw_profile.json").string();  // directory made
  EXPECT_FALSE(read_bw_profile(path).has_value());
  BwProfile p;
  p.host = "box";
  p.cpu = "avx512";
  p.timestamp = "2026-11-29T18:00:00Z";
  p.gpus["NVIDIA H200"]["bf16"] = entry(10, 12);
  p.gpus["NVIDIA RTX 4090"]["bf16"] = entry(8, 5);
  write_bw_profile(p, path);
  auto q = read_bw_profile(path);
  ASSERT_TRUE(q.has_value());
  EXPECT_EQ(q->host, "box");
  const BwEntry* h = q->find("NVIDIA H200", "bf16");
  ASSERT_NE(h, nullptr);
  EXPECT_DOUBLE_EQ(h->pcie_gather_gbs, 40);
  EXPECT_DOUBLE_EQ(h->cpu_overlap_gbs, 45);
  EXPECT_DOUBLE_EQ(h->hybrid_tokens_per_s, 12);
  EXPECT_EQ(h->recommended, "hybrid");
  EXPECT_EQ(q->find("NVIDIA RTX 4090", "bf16")->recommended, "offload");
  EXPECT_EQ(q->find("NVIDIA H200", "fp8"), nullptr);
  EXPECT_EQ(q->find("NVIDIA A100", "bf16"), nullptr);
  for (const auto& f : fs::directory_iterator(d / "deep"))  // no temporary left behind
    EXPECT_EQ(f.path().filename(), "bw_profile.json");
  fs::remove_all(d);
}

// ft bench bw on several GPUs: each GPU's host->GPU figure alone and all at once round-trip
// through the file, and tensor parallelism takes the concurrent one.
TEST(BwProfile, PerGpuBandwidthsRoundTripAndTensorParallelUsesTheConcurrentFigure) {
  const fs::path d = temp_dir("multi");
  const std::string path = (d / "bw_profile.json").string();
  BwProfile p;
  BwEntry e = entry(10, 12);
  e.pcie_linear_gbs = 55;
  e.pcie_gpu_alone_gbs = {54, 53};
  e.pcie_gpu_concurrent_gbs = {30, 28};
  p.gpus["NVIDIA H200"]["bf16"] = e;
  write_bw_profile(p, path);
  const auto q = read_bw_profile(path);
  ASSERT_TRUE(q.has_value());
  const BwEntry* h = q->find("NVIDIA H200", "bf16");
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(h->pcie_gpu_alone_gbs, (std::vector<double>{54, 53}));
  EXPECT_EQ(h->pcie_gpu_concurrent_gbs, (std::vector<double>{30, 28}));
  EXPECT_DOUBLE_EQ(h->pcie_per_gpu_gbs(1), 53);  // one GPU: the slowest alone
  EXPECT_DOUBLE_EQ(h->pcie_per_gpu_gbs(2), 28);  // measured together: the slowest concurrent
  EXPECT_DOUBLE_EQ(h->pcie_per_gpu_gbs(4), 14.5);  // more than measured: the total shared
  BwEntry old;  // a profile from one GPU only
  old.pcie_linear_gbs = 50;
  EXPECT_DOUBLE_EQ(old.pcie_per_gpu_gbs(1), 50);
  EXPECT_DOUBLE_EQ(old.pcie_per_gpu_gbs(2), 50);
  EXPECT_DOUBLE_EQ(BwEntry{}.pcie_per_gpu_gbs(2), 0);
  fs::remove_all(d);
}

TEST(BwProfile, CorruptFileIsAnErrorNamingTheFix) {
  const fs::path d = temp_dir("bad");
  const std::string path = (d / "bw_profile.json").string();
  std::ofstream(path) << "{not json";
  try {
    read_bw_profile(path);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ft bench bw"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  std::ofstream(path) << R"({"version": 99, "gpus": {}})";
  EXPECT_THROW(read_bw_profile(path), Error);
  fs::remove_all(d);
}

TEST(BwProfile, RecommendsHybridOnlyWhenItWinsEndToEnd) {
  EXPECT_EQ(recommend_backend(entry(10, 12)), "hybrid");
  EXPECT_EQ(recommend_backend(entry(10, 10.2)), "offload");  // within the margin
  EXPECT_EQ(recommend_backend(entry(10, 5)), "offload");
  EXPECT_EQ(recommend_backend(entry(0, 0)), "offload");  // no A/B: never hybrid
  BwEntry fast_cpu = entry(0, 0);
  fast_cpu.cpu_expert_gbs = 1000;  // bandwidth alone does not decide (upstream #151, #436)
  EXPECT_EQ(recommend_backend(fast_cpu), "offload");
}

TEST(BwProfile, FetchFractionPrefersTheConcurrentPair) {
  BwEntry e = entry(1, 1);
  EXPECT_DOUBLE_EQ(e.hybrid_fetch_fraction(), 30.0 / 75.0);
  e.pcie_overlap_gbs = e.cpu_overlap_gbs = 0;
  EXPECT_DOUBLE_EQ(e.hybrid_fetch_fraction(), 40.0 / 100.0);
  EXPECT_DOUBLE_EQ(BwEntry{}.hybrid_fetch_fraction(), 0.0);
}

TEST(MoeBackendChoice, ParseAndNames) {
  for (const char* n : {"auto", "fused", "offload", "cpu", "hybrid"})
    EXPECT_STREQ(moe_backend_name(parse_moe_backend(n)), n);
  try {
    parse_moe_backend("gpu");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("auto, fused, offload, cpu or hybrid"), std::string::npos);
  }
}

TEST(MoeBackendChoice, AutoDecision) {
  const BwEntry wins = entry(10, 12), loses = entry(10, 6);
  EXPECT_EQ(choose_moe_backend(MoeBackend::AUTO, false, true, &wins).backend, MoeBackend::CPU);
  EXPECT_EQ(choose_moe_backend(MoeBackend::AUTO, true, true, &wins).backend, MoeBackend::FUSED);
  auto h = choose_moe_backend(MoeBackend::AUTO, true, false, &wins);
  EXPECT_EQ(h.backend, MoeBackend::HYBRID);
  EXPECT_DOUBLE_EQ(h.pcie_Bps, 30e9);  // the concurrent pair feeds the split
  EXPECT_DOUBLE_EQ(h.cpu_Bps, 45e9);
  EXPECT_NE(h.reason.find("12.00"), std::string::npos) << h.reason;
  EXPECT_EQ(choose_moe_backend(MoeBackend::AUTO, true, false, &loses).backend,
            MoeBackend::OFFLOAD);
  auto none = choose_moe_backend(MoeBackend::AUTO, true, false, nullptr);
  EXPECT_EQ(none.backend, MoeBackend::OFFLOAD);
  EXPECT_NE(none.reason.find("ft bench bw"), std::string::npos);
  // Experts HYBRID's CPU share cannot compute (gpt-oss): offload where hybrid would win; an
  // explicit hybrid is kept (the transformer refuses it with the reason).
  auto oss = choose_moe_backend(MoeBackend::AUTO, true, false, &wins, false);
  EXPECT_EQ(oss.backend, MoeBackend::OFFLOAD);
  EXPECT_NE(oss.reason.find("no gpt-oss experts on the CPU share"), std::string::npos)
      << oss.reason;
  EXPECT_EQ(choose_moe_backend(MoeBackend::HYBRID, true, false, &wins, false).backend,
            MoeBackend::HYBRID);
}

TEST(MoeBackendChoice, ExplicitChoicesAreKeptOrRefused) {
  EXPECT_EQ(choose_moe_backend(MoeBackend::CPU, true, true, nullptr).backend, MoeBackend::CPU);
  EXPECT_EQ(choose_moe_backend(MoeBackend::CPU, false, false, nullptr).backend, MoeBackend::CPU);
  EXPECT_EQ(choose_moe_backend(MoeBackend::HYBRID, true, true, nullptr).backend,
            MoeBackend::HYBRID);
  EXPECT_EQ(choose_moe_backend(MoeBackend::OFFLOAD, true, false, nullptr).backend,
            MoeBackend::OFFLOAD);
  for (MoeBackend b : {MoeBackend::FUSED, MoeBackend::OFFLOAD, MoeBackend::HYBRID}) {
    try {
      choose_moe_backend(b, false, true, nullptr);
      FAIL();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("needs a CUDA device"), std::string::npos);
    }
  }
}

}  // namespace
}  // namespace ft
