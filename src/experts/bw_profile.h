// The bandwidth profile `ft bench bw` writes and `--moe-backend auto` reads: per GPU name and
// expert format, host->GPU and CPU expert-kernel bandwidths (alone and concurrently) and an
// end-to-end decode A/B of offload vs hybrid; plus the backend decision made from it.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ft {

// How the routed experts run: all resident on the GPU (fused), a VRAM slot cache fed over
// PCIe (offload), misses split between PCIe fetch and CPU compute (hybrid), the whole model on
// the CPU (cpu), or chosen at start-up (auto).
enum class MoeBackend { AUTO, FUSED, OFFLOAD, CPU, HYBRID };
const char* moe_backend_name(MoeBackend b);
// "auto|fused|offload|cpu|hybrid"; throws ft::Error naming the choices on anything else.
MoeBackend parse_moe_backend(const std::string& s);

// One (GPU, expert format) measurement. Bandwidths in GB/s (1e9 bytes/s); tok/s 0 when the
// A/B did not run.
struct BwEntry {
  double pcie_linear_gbs = 0;      // pinned host -> device, large linear copies
  double pcie_gather_gbs = 0;      // expert-sized copies from scattered host experts, alone
  double cpu_expert_gbs = 0;       // CPU expert kernel, decode (1 token), alone
  double pcie_overlap_gbs = 0;     // the two above running at the same time
  double cpu_overlap_gbs = 0;
  double offload_tokens_per_s = 0;  // end-to-end decode, same model and budget
  double hybrid_tokens_per_s = 0;
  std::string model;                // what the A/B ran ("synthetic 48x128 top-8 ...")
  std::string recommended;          // "hybrid" or "offload"
  // Pinned host -> GPU (linear) of each GPU of the machine alone and with all of them copying
  // at once (their links share the host's PCIe root and memory); empty when not measured.
  std::vector<double> pcie_gpu_alone_gbs, pcie_gpu_concurrent_gbs;

  // Host -> GPU bandwidth each of `world` GPUs gets when all copy at once (tensor
  // parallelism): the slowest GPU's concurrent figure when `world` GPUs were measured together;
  // more GPUs than measured share the measured total; one GPU, or no concurrent measurement:
  // the slowest alone figure (else pcie_linear_gbs). 0 when nothing was measured.
  double pcie_per_gpu_gbs(int world) const;

  // Share of a step's misses to fetch over PCIe so fetch and CPU finish together: from the
  // concurrent pair when measured, else the standalone pair. 0 when nothing was measured.
  double hybrid_fetch_fraction() const;
};

// Hybrid must beat offload end to end by this factor to be recommended.
constexpr double k_hybrid_margin = 1.03;
// "hybrid" when the A/B ran and hybrid beat offload by k_hybrid_margin, else "offload".
std::string recommend_backend(const BwEntry& e);

struct BwProfile {
  static constexpr int k_version = 1;
  // GPU name ("NVIDIA H200") -> expert format ("bf16") -> entry.
  std::map<std::string, std::map<std::string, BwEntry>> gpus;
  std::string host, cpu;  // where it was measured (host name, CPU kernel ISA)
  std::string timestamp;  // UTC, ISO 8601

  const BwEntry* find(const std::string& gpu, const std::string& format) const;
};

// $XDG_CACHE_HOME/ft/bw_profile.json, else $HOME/.cache/ft/bw_profile.json.
std::string bw_profile_path();
// nullopt when the file does not exist. A file that is not a profile (bad JSON, other
// version) is an ft::Error naming the path and the fix (rerun ft bench bw).
std::optional<BwProfile> read_bw_profile(const std::string& path);
// Creates the directory; writes a temporary file and renames it over path (atomic).
void write_bw_profile(const BwProfile& p, const std::string& path);

// The start-up decision. cuda: a CUDA device is usable; experts_fit: every weight fits the
// budget (fused possible); profile: this GPU's entry for the model's expert format, if any.
struct BackendChoice {
  MoeBackend backend;
  std::string reason;  // one line for the log
  // Hybrid's split inputs (bytes/s) from the profile: the concurrent pair when measured, else
  // the standalone pair; 0 when there is no profile (the runner then uses its default).
  double pcie_Bps = 0, cpu_Bps = 0;
};
// cpu_share_ok: HYBRID's CPU share computes the model's experts (ModelConfig::
// plain_swiglu_experts); when not, auto takes offload where the profile would pick hybrid.
BackendChoice choose_moe_backend(MoeBackend requested, bool cuda, bool experts_fit,
                                 const BwEntry* profile, bool cpu_share_ok = true);

}  // namespace ft
