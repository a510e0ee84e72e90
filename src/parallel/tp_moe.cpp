// Tensor-parallel ranks' MoE backend: the single-GPU choice per rank, and the hybrid split of
// ranks that share one host.
#include "parallel/tp_moe.h"

#include <fmt/format.h>

#include <algorithm>

#include "base/error.h"

namespace ft {

void check_tp_moe_backend(MoeBackend requested, const ModelConfig& c) {
  if (requested == MoeBackend::CPU)
    fail("--moe-backend cpu runs the whole model on the CPU and does not combine with "
         "--tensor-parallel; use --moe-backend auto, fused, offload or hybrid, or drop "
         "--tensor-parallel");
  if (requested == MoeBackend::HYBRID && !c.plain_swiglu_experts())
    fail("{}: --moe-backend hybrid does not run expert biases or the clamped SwiGLU on its CPU "
         "share (gpt-oss); use --moe-backend offload",
         c.model_type);
}

// Measured by tests/cuda/tp_bench --hybrid on two H200s (48-layer Qwen3-30B-A3B shapes, bf16,
// batch 1, 16 GiB per GPU, 55 GB/s host->GPU per GPU with both copying, CPU experts 139 GB/s on
// 32 threads; 2026-11-30): offload decodes 133.9 tok/s at TP=1 and 158.9-160.7 at TP=2, HYBRID
// 64.3 at TP=1 and 29.3-65.0 at TP=2 (two runs): its CPU share's misses are never cached (hit
// rate 83% vs 95% at TP=2) and each MoE layer waits on host round trips, so on this host auto
// keeps offload, as the profile's single-GPU A/B says; the rule is the same per rank.
BackendChoice choose_tp_moe_backend(MoeBackend requested, const ModelConfig& c, bool experts_fit,
                                    const BwEntry* profile) {
  check_tp_moe_backend(requested, c);
  return choose_moe_backend(requested, true, experts_fit, profile, c.plain_swiglu_experts());
}

TpHybridSplit tp_hybrid_split(double pcie_Bps, double cpu_Bps, const BwEntry* profile,
                              int local_ranks, int threads) {
  FT_CHECK(pcie_Bps > 0 && cpu_Bps > 0 && local_ranks >= 1, "tp_hybrid_split: {} {} {}",
           pcie_Bps, cpu_Bps, local_ranks);
  double share = 1;
  if (profile && local_ranks > 1) {
    const double alone = profile->pcie_per_gpu_gbs(1), all = profile->pcie_per_gpu_gbs(local_ranks);
    if (alone > 0 && all > 0) share = std::min(1.0, all / alone);
  }
  return {.pcie_Bps = pcie_Bps * share,
          .cpu_Bps = cpu_Bps / local_ranks,
          .cpu_threads = std::max(1, threads / local_ranks)};
}

std::string tp_hybrid_summary(const TpHybridSplit& s, int local_ranks) {
  return fmt::format("PCIe {:.1f} GB/s vs CPU {:.1f} GB/s, {} CPU threads ({} rank{} share the "
                     "host), fetch fraction {:.3f}",
                     s.pcie_Bps / 1e9, s.cpu_Bps / 1e9, s.cpu_threads, local_ranks,
                     local_ranks == 1 ? "" : "s", s.fetch_fraction());
}

}  // namespace ft
