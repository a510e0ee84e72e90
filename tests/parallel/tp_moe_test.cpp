// Tensor-parallel ranks' MoE backend (parallel/tp_moe.cpp): the per-rank hybrid split (PCIe
// scaled to the concurrent per-GPU rate, CPU bandwidth and threads divided among the ranks of a
// host), the per-rank backend choice, and the one-line refusals.
#include <gtest/gtest.h>

#include <string>

#include "base/error.h"
#include "experts/expert_cache.h"
#include "parallel/tp_moe.h"

namespace ft {
namespace {

// A two-GPU profile: alone 56 / 55 GB/s, both at once 44 / 45; the single-GPU split pair is the
// concurrent (overlap) one, 30 GB/s PCIe vs 45 GB/s CPU.
BwEntry two_gpu_profile(double offload_tps = 10, double hybrid_tps = 12) {
  BwEntry e;
  e.pcie_linear_gbs = 55;
  e.pcie_gather_gbs = 40;
  e.cpu_expert_gbs = 60;
  e.pcie_overlap_gbs = 30;
  e.cpu_overlap_gbs = 45;
  e.pcie_gpu_alone_gbs = {56, 55};
  e.pcie_gpu_concurrent_gbs = {44, 45};
  e.offload_tokens_per_s = offload_tps;
  e.hybrid_tokens_per_s = hybrid_tps;
  e.recommended = recommend_backend(e);
  return e;
}

ModelConfig qwen3() {
  ModelConfig c;
  c.model_type = "qwen3_moe";
  return c;
}

ModelConfig gpt_oss() {
  ModelConfig c;
  c.model_type = "gpt_oss";
  c.moe_bias = true;
  c.expert_act.kind = ExpertActivation::Kind::SWIGLU_OAI;
  return c;
}

std::string refusal(MoeBackend b, const ModelConfig& c) {
  try {
    check_tp_moe_backend(b, c);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(TpHybridSplit, OneRankIsTheSingleGpuSplit) {
  const BwEntry p = two_gpu_profile();
  const TpHybridSplit s = tp_hybrid_split(30e9, 45e9, &p, 1, 32);
  EXPECT_DOUBLE_EQ(s.pcie_Bps, 30e9);
  EXPECT_DOUBLE_EQ(s.cpu_Bps, 45e9);
  EXPECT_EQ(s.cpu_threads, 32);
  EXPECT_DOUBLE_EQ(s.fetch_fraction(), 30.0 / 75.0);
}

TEST(TpHybridSplit, RanksShareTheLinksTheDramAndTheCores) {
  const BwEntry p = two_gpu_profile();
  const TpHybridSplit s = tp_hybrid_split(30e9, 45e9, &p, 2, 32);
  // PCIe: the slowest concurrent GPU (44) over the slowest alone (55).
  EXPECT_DOUBLE_EQ(s.pcie_Bps, 30e9 * 44.0 / 55.0);
  EXPECT_DOUBLE_EQ(s.cpu_Bps, 22.5e9);
  EXPECT_EQ(s.cpu_threads, 16);
  EXPECT_DOUBLE_EQ(s.fetch_fraction(), 24.0 / (24.0 + 22.5));
  // Four ranks on a host measured with two: pcie_per_gpu_gbs shares the measured total
  // (89 / 4 = 22.25 per GPU); 7 threads give 1 each.
  const TpHybridSplit f = tp_hybrid_split(30e9, 45e9, &p, 4, 7);
  EXPECT_DOUBLE_EQ(f.pcie_Bps, 30e9 * 22.25 / 55.0);
  EXPECT_DOUBLE_EQ(f.cpu_Bps, 11.25e9);
  EXPECT_EQ(f.cpu_threads, 1);
  EXPECT_EQ(tp_hybrid_split(30e9, 45e9, &p, 4, 2).cpu_threads, 1);  // fewer threads than ranks
}

TEST(TpHybridSplit, WithoutAConcurrentMeasurementPcieIsUnscaled) {
  const TpHybridSplit none = tp_hybrid_split(25e9, 25e9, nullptr, 2, 8);  // runner defaults
  EXPECT_DOUBLE_EQ(none.pcie_Bps, 25e9);
  EXPECT_DOUBLE_EQ(none.cpu_Bps, 12.5e9);
  EXPECT_EQ(none.cpu_threads, 4);
  BwEntry one_gpu = two_gpu_profile();  // measured on one GPU only
  one_gpu.pcie_gpu_alone_gbs.clear();
  one_gpu.pcie_gpu_concurrent_gbs.clear();
  EXPECT_DOUBLE_EQ(tp_hybrid_split(30e9, 45e9, &one_gpu, 2, 8).pcie_Bps, 30e9);
  BwEntry faster = two_gpu_profile();  // noise: concurrent above alone never raises PCIe
  faster.pcie_gpu_concurrent_gbs = {58, 57};
  EXPECT_DOUBLE_EQ(tp_hybrid_split(30e9, 45e9, &faster, 2, 8).pcie_Bps, 30e9);
}

// The rank's q* split fetches more of its misses than one GPU would (its CPU share is slower),
// and fetch and CPU then finish within one expert of each other.
TEST(TpHybridSplit, RankFetchCountBalancesItsOwnRates) {
  const BwEntry p = two_gpu_profile();
  const TpHybridSplit one = tp_hybrid_split(30e9, 45e9, &p, 1, 32);
  const TpHybridSplit two = tp_hybrid_split(30e9, 45e9, &p, 2, 32);
  for (int64_t misses : {1, 5, 8, 16, 40}) {
    const int64_t f1 = hybrid_fetch_count(misses, one.fetch_fraction());
    const int64_t f2 = hybrid_fetch_count(misses, two.fetch_fraction());
    EXPECT_GE(f2, f1) << misses;
    const double t_fetch = f2 / two.pcie_Bps, t_cpu = (misses - f2) / two.cpu_Bps;
    EXPECT_LE(std::abs(t_fetch - t_cpu), 1 / std::min(two.pcie_Bps, two.cpu_Bps) + 1e-18)
        << misses;
  }
}

TEST(TpHybridSplit, SummaryNamesTheSplit) {
  const std::string s = tp_hybrid_summary({.pcie_Bps = 24e9, .cpu_Bps = 22.5e9, .cpu_threads = 16},
                                          2);
  EXPECT_EQ(s, "PCIe 24.0 GB/s vs CPU 22.5 GB/s, 16 CPU threads (2 ranks share the host), "
               "fetch fraction 0.516");
}

TEST(TpMoeBackend, RefusesCpuAndHybridGptOssInOneLine) {
  const std::string cpu = refusal(MoeBackend::CPU, qwen3());
  EXPECT_NE(cpu.find("--moe-backend cpu"), std::string::npos) << cpu;
  EXPECT_NE(cpu.find("--tensor-parallel"), std::string::npos) << cpu;
  EXPECT_NE(cpu.find("use --moe-backend auto, fused, offload or hybrid"), std::string::npos) << cpu;
  EXPECT_EQ(cpu.find('\n'), std::string::npos);
  const std::string oss = refusal(MoeBackend::HYBRID, gpt_oss());
  EXPECT_NE(oss.find("gpt_oss: --moe-backend hybrid"), std::string::npos) << oss;
  EXPECT_NE(oss.find("use --moe-backend offload"), std::string::npos) << oss;
  EXPECT_EQ(oss.find('\n'), std::string::npos);
  for (MoeBackend b : {MoeBackend::AUTO, MoeBackend::FUSED, MoeBackend::OFFLOAD})
    EXPECT_EQ(refusal(b, gpt_oss()), "") << moe_backend_name(b);
  for (MoeBackend b : {MoeBackend::AUTO, MoeBackend::FUSED, MoeBackend::OFFLOAD, MoeBackend::HYBRID})
    EXPECT_EQ(refusal(b, qwen3()), "") << moe_backend_name(b);
  EXPECT_THROW(choose_tp_moe_backend(MoeBackend::CPU, qwen3(), true, nullptr), Error);
}

TEST(TpMoeBackend, AutoChoosesPerRankAsOneGpuDoes) {
  const BwEntry wins = two_gpu_profile(10, 12), loses = two_gpu_profile(10, 10.1);
  const ModelConfig q = qwen3();
  EXPECT_EQ(choose_tp_moe_backend(MoeBackend::AUTO, q, true, &wins).backend, MoeBackend::FUSED);
  EXPECT_EQ(choose_tp_moe_backend(MoeBackend::AUTO, q, false, nullptr).backend,
            MoeBackend::OFFLOAD);
  EXPECT_EQ(choose_tp_moe_backend(MoeBackend::AUTO, q, false, &loses).backend,
            MoeBackend::OFFLOAD);
  const BackendChoice h = choose_tp_moe_backend(MoeBackend::AUTO, q, false, &wins);
  EXPECT_EQ(h.backend, MoeBackend::HYBRID);
  EXPECT_DOUBLE_EQ(h.pcie_Bps, 30e9);  // the single-GPU pair: tp_hybrid_split's input
  EXPECT_DOUBLE_EQ(h.cpu_Bps, 45e9);
  // gpt-oss experts never go hybrid: auto offloads, saying why.
  const BackendChoice o = choose_tp_moe_backend(MoeBackend::AUTO, gpt_oss(), false, &wins);
  EXPECT_EQ(o.backend, MoeBackend::OFFLOAD);
  EXPECT_NE(o.reason.find("gpt-oss"), std::string::npos) << o.reason;
  // Explicit backends stay as asked.
  EXPECT_EQ(choose_tp_moe_backend(MoeBackend::HYBRID, q, true, nullptr).backend,
            MoeBackend::HYBRID);
  EXPECT_EQ(choose_tp_moe_backend(MoeBackend::OFFLOAD, q, true, &wins).backend,
            MoeBackend::OFFLOAD);
}

}  // namespace
}  // namespace ft
