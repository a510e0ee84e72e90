// make_tp_runner (CUDA builds): `ft serve --tensor-parallel N` runs the model split over N GPUs
// (parallel/cuda/tp_transformer.h) behind the Runner seam. Each GPU plans its own VRAM
// (--gpu-memory / --memory-ratio are per GPU): every expert slice resident (fused) when it
// fits, else an expert slot cache of slices (offload) fed from that rank's pinned copy.
// Nodes > 0 of a multi-host run (serve_tp_worker) replay node 0's steps.
#include <fmt/format.h>

#include <mutex>

#include "backend/cuda/cuda_ops.h"
#include "base/error.h"
#include "base/log.h"
#include "cache/memory_plan.h"
#include "engine/backend.h"
#include "experts/bw_profile.h"
#include "experts/gpu_expert_store.h"
#include "parallel/cuda/tp_transformer.h"

namespace ft {

namespace {
std::string gib(size_t b) { return fmt::format("{:.2f} GiB", b / double(size_t{1} << 30)); }

// --tp-experts auto resolves by choose_tp_experts (offload: --moe-backend offload asked for).
TpOptions tp_options(const Model& model, const BackendOptions& b) {
  const bool offload = parse_moe_backend(b.moe_backend) == MoeBackend::OFFLOAD;
  const TpExperts experts = choose_tp_experts(parse_tp_experts(b.tp_experts), model.config(),
                                              b.tensor_parallel, offload);
  FT_LOG_INFO("tensor parallel: routed experts {} (--tp-experts {})", tp_experts_name(experts),
              b.tp_experts);
  return {.world = b.tensor_parallel, .nnodes = b.nnodes, .node_rank = b.node_rank,
          .master = b.master, .experts = experts};
}

// Host->GPU GB/s each of `local` GPUs gets when all copy at once, from the bandwidth profile
// (`ft bench bw` on several GPUs); 0 without one.
double tp_pcie_gbs(const BackendOptions& b, int local) {
  try {
    const std::string path = b.profile_path.empty() ? bw_profile_path() : b.profile_path;
    const auto p = read_bw_profile(path);
    const std::string s = cuda::device_summary();
    const BwEntry* e = p ? p->find(s.substr(0, s.find(',')), "bf16") : nullptr;
    return e ? e->pcie_per_gpu_gbs(local) : 0;
  } catch (const Error&) {
    return 0;  // a broken profile: cuda_runner warns about it
  }
}

// Per rank, on its thread and device: plans this GPU's budget and pins the rank's experts when
// they are offloaded. The first rank's plan goes to `base` (every rank's shard is alike).
TpSetupFn tp_setup(const BackendOptions& b, const GpuSeqLayout& layout, int64_t chunk,
                   RunnerStats* base, std::mutex* m) {
  const MoeBackend requested = parse_moe_backend(b.moe_backend);
  if (requested == MoeBackend::CPU || requested == MoeBackend::HYBRID)
    fail("--moe-backend {} does not combine with --tensor-parallel; use auto, fused or offload",
         moe_backend_name(requested));
  return [=](int rank, const Model& shard) {
    size_t free_b = 0, total_b = 0;
    cuda::memory_info(&free_b, &total_b);
    const size_t budget = b.gpu_memory.empty()
                              ? static_cast<size_t>(b.memory_ratio * static_cast<double>(free_b))
                              : parse_size(b.gpu_memory);
    if (budget > free_b)
      fail("--gpu-memory {} is more than the {} free on GPU {}; lower it", gib(budget),
           gib(free_b), rank);
    const HostExperts shape = HostExperts::shape_of(shard);
    MemoryRequest req =
        cuda_offload_request(shard, shape, layout.ctx, chunk, budget, layout.seqs);
    const int64_t all = shape.moe_layers * shape.n_experts;
    MemoryRequest all_req = req;
    all_req.slots_override = all;
    req.slots_override = b.moe_cache_size;
    req.cache_rate = b.moe_cache_rate;
    bool fits = b.moe_cache_size < 0 && b.moe_cache_rate < 0;
    try {
      plan_memory(all_req);
    } catch (const Error&) {
      if (requested == MoeBackend::FUSED) throw;
      fits = false;
    }
    const bool fused = requested == MoeBackend::FUSED || (requested == MoeBackend::AUTO && fits);
    const MemoryPlan plan = plan_memory(fused ? all_req : req);
    FT_LOG_INFO("tensor parallel rank {}: {} on {}; budget {} of {} free: {}", rank,
                fused ? "fused" : "offload", cuda::device_summary(), gib(budget), gib(free_b),
                plan.summary());
    TpRankSetup s;
    if (!fused) {
      auto host = std::make_shared<HostExperts>(HostExperts::copy_of(shard));
      s.offload = {.experts = host.get(), .slots = plan.expert_slots};
      s.keep = host;
      // The ranks copy at once: each gets the profile's concurrent per-GPU figure.
      if (const double gbs = tp_pcie_gbs(b, b.tensor_parallel / b.nnodes); gbs > 0) {
        s.offload.pcie_Bps = gbs * 1e9;
        if (rank == 0)
          FT_LOG_INFO("tensor parallel: host->GPU {:.1f} GB/s per GPU with {} copying at once "
                      "(bw profile)", gbs, b.tensor_parallel / b.nnodes);
      }
    }
    if (rank == 0) {
      std::lock_guard<std::mutex> lock(*m);
      base->backend = fused ? "fused" : "offload";
      base->memory_budget = budget;
      base->memory_planned = plan.used;
      base->expert_slots = plan.expert_slots;
      base->experts_total = all;
    }
    return s;
  };
}

// TpTransformer behind the Runner seam (node 0). Slots are the ranks' sequences.
class TpRunner : public Runner {
 public:
  TpRunner(const Model& model, const BackendOptions& b, const GpuSeqLayout& layout,
           int64_t chunk)
      : model_(model),
        tp_(model, tp_options(model, b), layout.ctx, chunk, layout.seqs,
            tp_setup(b, layout, chunk, &base_, &m_)) {
    base_.device = fmt::format("{} x tensor parallel ({} per node): {}", b.tensor_parallel,
                               b.tensor_parallel / b.nnodes, cuda::device_summary());
    base_.kv_tokens = layout.ctx * layout.seqs;
  }
  int max_seqs() const override { return tp_.max_seqs(); }
  int64_t capacity() const override { return tp_.capacity(); }
  int64_t max_chunk() const override { return tp_.max_chunk(); }
  void open(int seq) override { FT_CHECK(seq >= 0 && seq < max_seqs(), "slot {}", seq); }
  void close(int) override {}
  void forward_batch(std::span<const RunnerStep> steps) override {
    batch_.clear();
    for (const RunnerStep& s : steps) batch_.push_back({s.seq, s.ids, s.n, s.pos0, s.logits});
    tp_.forward_batch(batch_);
  }
  RunnerStats stats() const override {  // rank 0's share (all ranks alike)
    return with_runtime(base_, tp_.rank(0).runtime_stats());
  }
  size_t weight_bytes() const override { return tp_.weight_bytes(); }
  size_t kv_bytes() const override {
    // A shard: its KV heads; every layer is attention (the plan refuses DeltaNet models).
    const ModelConfig& c = tp_.rank(0).model().config();
    return static_cast<size_t>(2 * c.n_layers * c.kv_dim() * tp_.capacity()) *
           max_seqs() * sizeof(float) * tp_.local_ranks();
  }

 private:
  const Model& model_;
  std::mutex m_;
  RunnerStats base_;  // before tp_: the setup writes it
  TpTransformer tp_;
  std::vector<CudaSeqStep> batch_;
};
}  // namespace

std::unique_ptr<Runner> make_tp_runner(const Model& model, EngineOptions& opt,
                                       const BackendOptions& b) {
  const GpuSeqLayout layout = gpu_seq_layout(opt, b);
  opt.ctx_size = layout.ctx;
  opt.max_running = layout.seqs;
  FT_LOG_INFO("tensor parallel: {} GPUs over {} node(s), this node {}", b.tensor_parallel,
              b.nnodes, b.node_rank);
  return std::make_unique<TpRunner>(model, b, layout, opt.chunk);
}

void serve_tp_worker(const Model& model, EngineOptions& opt, const BackendOptions& b) {
  validate_backend_options(b);
  const GpuSeqLayout layout = gpu_seq_layout(opt, b);
  RunnerStats base;
  std::mutex m;
  TpTransformer tp(model, tp_options(model, b), layout.ctx, opt.chunk, layout.seqs,
                   tp_setup(b, layout, opt.chunk, &base, &m));
  FT_LOG_INFO("node {}: {} ranks ready; serving node 0's steps", b.node_rank, tp.local_ranks());
  tp.serve_worker();
  FT_LOG_INFO("node {}: node 0 stopped", b.node_rank);
}

}  // namespace ft
