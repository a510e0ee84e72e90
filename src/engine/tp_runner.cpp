// make_tp_runner (CUDA builds): `ft serve --tensor-parallel N` runs the model split over N GPUs
// (parallel/cuda/tp_transformer.h) behind the Runner seam. Each GPU plans its own VRAM
// (--gpu-memory / --memory-ratio are per GPU) and picks its backend as one GPU does
// (parallel/tp_moe.h): every expert slice resident (fused) when it fits, else an expert slot
// cache of slices (offload) fed from that rank's pinned copy, or HYBRID (that rank's misses
// split between its PCIe fetches and its share of the host's CPU threads and bandwidth).
// Nodes > 0 of a multi-host run (serve_tp_worker) replay node 0's steps.
#include <fmt/format.h>

#include <mutex>
#include <optional>

#include "backend/cpu/thread_pool.h"
#include "backend/cuda/cuda_ops.h"
#include "base/error.h"
#include "base/log.h"
#include "cache/memory_plan.h"
#include "engine/backend.h"
#include "experts/bw_profile.h"
#include "experts/gpu_expert_store.h"
#include "parallel/cuda/tp_transformer.h"
#include "parallel/tp_moe.h"

namespace ft {

namespace {
std::string gib(size_t b) { return fmt::format("{:.2f} GiB", b / double(size_t{1} << 30)); }

// --tp-experts auto resolves by choose_tp_experts (offload: --moe-backend offload asked for).
TpOptions tp_options(const Model& model, const BackendOptions& b) {
  const MoeBackend requested = parse_moe_backend(b.moe_backend);
  const bool offload = requested == MoeBackend::OFFLOAD || requested == MoeBackend::HYBRID;
  const TpExperts experts = choose_tp_experts(parse_tp_experts(b.tp_experts), model.config(),
                                              b.tensor_parallel, offload);
  FT_LOG_INFO("tensor parallel: routed experts {} (--tp-experts {})", tp_experts_name(experts),
              b.tp_experts);
  return {.world = b.tensor_parallel, .nnodes = b.nnodes, .node_rank = b.node_rank,
          .master = b.master, .experts = experts};
}

// The bandwidth profile's entry for this GPU and the experts' format (the per-GPU host->GPU
// figures from the bf16 entry when this format's lacks them); nullopt without one. A broken
// profile is a warning here.
std::optional<BwEntry> tp_profile(const BackendOptions& b, const HostExperts& shape) {
  const std::optional<BwProfile> p = read_profile_or_warn(b);
  if (!p) return std::nullopt;
  const std::string gpu = gpu_name();
  const BwEntry* e = p->find(gpu, expert_format(shape));
  const BwEntry* bf16 = p->find(gpu, "bf16");
  if (!e && !bf16) return std::nullopt;
  BwEntry out = e ? *e : BwEntry{};
  if (!e) out.recommended = "offload";  // only the link figures: no A/B for this format
  if (out.pcie_gpu_concurrent_gbs.empty() && bf16) {
    out.pcie_gpu_alone_gbs = bf16->pcie_gpu_alone_gbs;
    out.pcie_gpu_concurrent_gbs = bf16->pcie_gpu_concurrent_gbs;
    if (out.pcie_linear_gbs <= 0) out.pcie_linear_gbs = bf16->pcie_linear_gbs;
  }
  return out;
}

// Per rank, on its thread and device: plans this GPU's budget, picks its backend and pins the
// rank's experts when they are offloaded. The first rank's plan goes to `base` (every rank's
// shard is alike). threads: the node's CPU threads (--threads; 0: every core), shared by its
// ranks' HYBRID workers.
TpSetupFn tp_setup(const Model& model, const BackendOptions& b, const GpuSeqLayout& layout,
                   int64_t chunk, int threads, RunnerStats* base, std::mutex* m) {
  const MoeBackend requested = parse_moe_backend(b.moe_backend);
  check_tp_moe_backend(requested, model.config());  // before any rank starts
  const int local = b.tensor_parallel / b.nnodes;
  const std::optional<BwEntry> profile = tp_profile(b, HostExperts::shape_of(model));
  threads = threads > 0 ? threads : cpu_count();
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
    const BackendChoice choice =
        choose_tp_moe_backend(requested, shard.config(), fits, profile ? &*profile : nullptr);
    const bool fused = choice.backend == MoeBackend::FUSED;
    const MemoryPlan plan = plan_memory(fused ? all_req : req);
    FT_LOG_INFO("tensor parallel rank {}: {} ({}) on {}; budget {} of {} free: {}", rank,
                moe_backend_name(choice.backend), choice.reason, cuda::device_summary(),
                gib(budget), gib(free_b), plan.summary());
    TpRankSetup s;
    if (!fused) {
      auto host = std::make_shared<HostExperts>(HostExperts::copy_of(shard));
      s.offload = {.experts = host.get(), .slots = plan.expert_slots};
      s.keep = host;
      if (choice.backend == MoeBackend::HYBRID) {
        // The single-GPU pair (profile, else the runner's defaults), shared among the ranks.
        const bool measured = choice.pcie_Bps > 0 && choice.cpu_Bps > 0;
        const TpHybridSplit split =
            tp_hybrid_split(measured ? choice.pcie_Bps : s.offload.pcie_Bps,
                            measured ? choice.cpu_Bps : s.offload.cpu_Bps,
                            profile ? &*profile : nullptr, local, threads);
        s.offload.mode = MoeMode::HYBRID;
        s.offload.pcie_Bps = split.pcie_Bps;
        s.offload.cpu_Bps = split.cpu_Bps;
        s.offload.cpu_threads = split.cpu_threads;
        FT_LOG_INFO("tensor parallel rank {}: hybrid split: {} ({})", rank,
                    tp_hybrid_summary(split, local),
                    measured ? "from the bw profile" : "defaults: run `ft bench bw`");
      } else if (const double gbs = profile ? profile->pcie_per_gpu_gbs(local) : 0; gbs > 0) {
        // The ranks copy at once: each gets the profile's concurrent per-GPU figure.
        s.offload.pcie_Bps = gbs * 1e9;
        if (rank == 0)
          FT_LOG_INFO("tensor parallel: host->GPU {:.1f} GB/s per GPU with {} copying at once "
                      "(bw profile)", gbs, local);
      }
    }
    if (rank == 0) {
      std::lock_guard<std::mutex> lock(*m);
      base->backend = moe_backend_name(choice.backend);
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
           int64_t chunk, int threads)
      : model_(model),
        tp_(model, tp_options(model, b), layout.ctx, chunk, layout.seqs,
            tp_setup(model, b, layout, chunk, threads, &base_, &m_)) {
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
    const int64_t vocab = model_.config().vocab_size;
    for (size_t i = 0; i < steps.size(); ++i) {
      const RunnerStep& s = steps[i];
      batch_.push_back({s.seq, s.ids, s.n, s.pos0, argmax_.logits_for(s, i, vocab)});
    }
    tp_.forward_batch(batch_);
    argmax_.finish(steps, vocab);
  }
  // Rank 0's figures, with the expert counts as one GPU would count them: slices (every rank
  // looks up the same experts' slices) rank 0's; whole experts (each rank its own) the local
  // ranks' sum. Bytes moved: every local rank's.
  RunnerStats stats() const override {
    CudaRuntimeStats r = tp_.rank(0).runtime_stats();
    const bool whole = tp_.plan().ranks[0].own_experts.size() > 0;
    for (int i = 1; i < tp_.local_ranks(); ++i) {
      const CudaRuntimeStats o = tp_.rank(i).runtime_stats();
      if (whole) {
        r.hits += o.hits, r.misses += o.misses;
        r.fetched_experts += o.fetched_experts, r.cpu_experts += o.cpu_experts;
        r.probation += o.probation;
      }
      r.fetched_bytes += o.fetched_bytes, r.streamed_bytes += o.streamed_bytes;
    }
    return with_runtime(base_, r);
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
  HostArgmax argmax_;
};
}  // namespace

std::unique_ptr<Runner> make_tp_runner(const Model& model, EngineOptions& opt,
                                       const BackendOptions& b) {
  const GpuSeqLayout layout = gpu_seq_layout(opt, b);
  opt.ctx_size = layout.ctx;
  opt.max_running = layout.seqs;
  FT_LOG_INFO("tensor parallel: {} GPUs over {} node(s), this node {}", b.tensor_parallel,
              b.nnodes, b.node_rank);
  return std::make_unique<TpRunner>(model, b, layout, opt.chunk, opt.threads);
}

void serve_tp_worker(const Model& model, EngineOptions& opt, const BackendOptions& b) {
  validate_backend_options(b);
  const GpuSeqLayout layout = gpu_seq_layout(opt, b);
  RunnerStats base;
  std::mutex m;
  TpTransformer tp(model, tp_options(model, b), layout.ctx, opt.chunk, layout.seqs,
                   tp_setup(model, b, layout, opt.chunk, opt.threads, &base, &m));
  FT_LOG_INFO("node {}: {} ranks ready; serving node 0's steps", b.node_rank, tp.local_ranks());
  tp.serve_worker();
  FT_LOG_INFO("node {}: node 0 stopped", b.node_rank);
}

}  // namespace ft
