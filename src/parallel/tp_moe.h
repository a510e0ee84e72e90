// The MoE backend of one tensor-parallel rank (CPU-side, no CUDA): which backend a rank's shard
// runs (the single-GPU rule per rank) and, for HYBRID, the q* split of a rank whose GPU shares
// the host's PCIe, DRAM and cores with the node's other ranks.
#pragma once
#include <string>

#include "experts/bw_profile.h"
#include "model/config.h"

namespace ft {

// Throws ft::Error (one line: why, and what to use) for a backend tensor parallelism does not
// run: cpu (the whole model on the CPU has no GPUs to split over), and hybrid for experts its
// CPU share cannot compute (gpt-oss's biases and clamped SwiGLU).
void check_tp_moe_backend(MoeBackend requested, const ModelConfig& c);

// One rank's backend: choose_moe_backend with the rank's own figures (experts_fit: every expert
// of the rank's shard fits its GPU's budget; profile: this GPU's entry, or nullptr); auto never
// picks hybrid for gpt-oss experts (offload instead). Refusals as check_tp_moe_backend.
BackendChoice choose_tp_moe_backend(MoeBackend requested, const ModelConfig& c, bool experts_fit,
                                    const BwEntry* profile);

// A HYBRID rank's split inputs and CPU workers.
struct TpHybridSplit {
  double pcie_Bps = 0, cpu_Bps = 0;  // this rank's host->GPU and CPU expert bandwidths
  int cpu_threads = 1;               // this rank's CPU workers (the ranks' sets are disjoint)
  double fetch_fraction() const { return pcie_Bps / (pcie_Bps + cpu_Bps); }  // q*'s f
};

// The split of each of `local_ranks` ranks sharing one host of `threads` CPU threads, from the
// single-GPU pair (pcie_Bps, cpu_Bps > 0: choose_moe_backend's figures from the profile, else
// the runner's defaults):
//   - PCIe: each GPU copies while the others do, so the pair's PCIe figure is scaled by
//     profile->pcie_per_gpu_gbs(local_ranks) / pcie_per_gpu_gbs(1) (the concurrent per-GPU
//     rate over the alone one; 1 without a profile or a concurrent measurement, at most 1);
//   - CPU: every rank's CPU workers run at once on the same DRAM, so each gets cpu_Bps /
//     local_ranks, on threads / local_ranks threads (at least 1).
// One local rank gives the single-GPU split unchanged.
TpHybridSplit tp_hybrid_split(double pcie_Bps, double cpu_Bps, const BwEntry* profile,
                              int local_ranks, int threads);

// One log line of a rank's split: "PCIe 39.2 GB/s vs CPU 15.0 GB/s, 16 CPU threads (2 ranks
// share the host), fetch fraction 0.723".
std::string tp_hybrid_summary(const TpHybridSplit& s, int local_ranks);

}  // namespace ft
