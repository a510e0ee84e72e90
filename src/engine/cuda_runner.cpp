// make_runner for CUDA builds: picks cpu / fused / offload / hybrid (--moe-backend, auto from
// the bandwidth profile), plans VRAM with the memory planner before anything is allocated, and
// runs the model on CudaTransformer. Plain C++ over the CUDA runner's headers.
#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "backend/cuda/cuda_ops.h"
#include "base/error.h"
#include "base/log.h"
#include "cache/memory_plan.h"
#include "engine/backend.h"
#include "engine/progress.h"
#include "experts/bw_profile.h"
#include "experts/gpu_expert_store.h"
#include "model/cuda_transformer.h"

namespace ft {

RunnerStats with_runtime(RunnerStats s, const CudaRuntimeStats& r) {
  s.steps = r.steps;
  s.hits = r.hits;
  s.misses = r.misses;
  s.fetched_experts = r.fetched_experts;
  s.cpu_experts = r.cpu_experts;
  s.probation_fetches = r.probation;
  s.fetched_bytes = r.fetched_bytes;
  s.streamed_bytes = r.streamed_bytes;
  s.t_attention = r.t_attention;
  s.t_routing = r.t_routing;
  s.t_hits = r.t_hits;
  s.t_fetch = r.t_fetch;
  s.t_cpu = r.t_cpu;
  return s;
}

namespace {
std::string gib(size_t b) { return fmt::format("{:.2f} GiB", b / double(size_t{1} << 30)); }


// CudaTransformer behind the Runner seam, owning the pinned experts it offloads (if any).
// Runner slots are the transformer's sequences; a new sequence simply starts at position 0.
class CudaRunner : public Runner {
 public:
  CudaRunner(const Model& model, int64_t capacity, int64_t max_chunk, int max_seqs,
             std::unique_ptr<HostExperts> host, const CudaOffload& offload, RunnerStats base,
             DType kv_dtype)
      : model_(model), host_(std::move(host)),
        tf_(model, capacity, max_chunk, with_host(offload, host_.get()), max_seqs, kv_dtype),
        base_(std::move(base)) {}

  int max_seqs() const override { return tf_.max_seqs(); }
  int64_t capacity() const override { return tf_.capacity(); }
  int64_t max_chunk() const override { return tf_.max_chunk(); }
  void open(int seq) override {
    FT_CHECK(seq >= 0 && seq < max_seqs(), "slot {}", seq);
    open_.at(seq) = true;
  }
  void close(int seq) override { open_.at(seq) = false; }

  // Elastic memory (issue #9): "moe" (offload: the slot pool) and "kv" (every slot's capacity).
  // Limits: a pool may grow by what the budget has left; the engine checks combined targets.
  std::vector<PoolInfo> pools() const override {
    std::vector<PoolInfo> p;
    const size_t left = base_.memory_budget > base_.memory_planned
                            ? base_.memory_budget - base_.memory_planned : 0;
    const ModelConfig& c = model_.config();
    if (host_) {
      const GpuExpertStore* s = tf_.expert_store();
      const int64_t all = host_->moe_layers * host_->n_experts;
      const size_t unit = host_->expert_bytes();
      p.push_back({.name = "moe", .unit = "slots", .size = s->slots(), .used = s->slots(),
                   .min = host_->n_experts,
                   .max = std::min<int64_t>(all, s->slots() + static_cast<int64_t>(left / unit)),
                   .bytes = unit * static_cast<size_t>(s->slots()), .unit_bytes = unit, .device = true});
    } else if (c.n_experts > 0) {
      const int64_t all = base_.experts_total;
      p.push_back({.name = "moe", .unit = "slots", .size = all, .used = all, .min = all,
                   .max = all, .device = true});
    }
    const size_t tok = tf_.kv_token_bytes();
    const int64_t size = tf_.capacity() * max_seqs();
    int64_t used = 0;
    for (int s = 0; s < max_seqs(); ++s) used += open_[s] ? tf_.capacity() : 0;
    p.push_back({.name = "kv", .unit = "tokens", .size = size, .used = used,
                 .min = 16 * max_seqs(),
                 .max = (size + static_cast<int64_t>(left / std::max<size_t>(tok, 1))) /
                        max_seqs() * max_seqs(),
                 .bytes = tok * static_cast<size_t>(size), .unit_bytes = tok, .device = true});
    return p;
  }
  void resize(const ResizeTarget& t) override {
    const int64_t old_slots = tf_.expert_store() ? tf_.expert_store()->slots() : -1;
    const int64_t old_kv = tf_.capacity() * max_seqs();
    if (t.moe_slots >= 0) {
      if (!host_ && t.moe_slots != base_.experts_total)
        fail("every expert is resident (fused backend): the expert cache cannot be resized");
      if (host_) tf_.resize_expert_slots(t.moe_slots);
    }
    if (t.kv_tokens >= 0) {
      try {
        tf_.resize_kv(t.kv_tokens / max_seqs(), open_);
      } catch (...) {  // roll the expert pool back too
        if (old_slots >= 0 && tf_.expert_store()->slots() != old_slots)
          tf_.resize_expert_slots(old_slots);
        throw;
      }
    }
    // The plan follows what is allocated now.
    if (host_) {
      const int64_t slots = tf_.expert_store()->slots();
      base_.memory_planned += (slots - old_slots) * static_cast<int64_t>(host_->expert_bytes());
      base_.expert_slots = slots;
    }
    const int64_t kv = tf_.capacity() * max_seqs();
    base_.memory_planned += (kv - old_kv) * static_cast<int64_t>(tf_.kv_token_bytes());
    base_.kv_tokens = kv;
  }
  bool device_memory(size_t* free_bytes, size_t* total_bytes) const override {
    cuda::memory_info(free_bytes, total_bytes);
    return true;
  }
  // Prefix cache: the sequence's KV and recurrent state copied to / from the host.
  bool prefix_io() const override { return true; }
  void export_kv(int seq, int64_t pos0, int64_t n, float* k, float* v) override {
    tf_.read_kv(seq, pos0, n, k, v);
  }
  void import_kv(int seq, int64_t pos0, int64_t n, const float* k, const float* v) override {
    tf_.write_kv(seq, pos0, n, k, v);
  }
  int64_t state_floats() const override {
    return static_cast<int64_t>(tf_.state_bytes_per_seq() / sizeof(float));
  }
  void export_state(int seq, float* dst) override { tf_.read_state(seq, dst); }
  void import_state(int seq, const float* src, int64_t len) override {
    tf_.write_state(seq, src, len);
  }
  // The prefix cache's VRAM tier: n recurrent-state slots, allocated once (make_runner took
  // their bytes off the planner's budget).
  void set_state_slots(int32_t n) {
    n_slots_ = tf_.state_bytes_per_seq() ? n : 0;
    if (n_slots_ > 0) slots_ = cuda::DeviceBuffer(n_slots_ * tf_.state_bytes_per_seq());
  }
  int32_t state_slots() const override { return n_slots_; }
  void state_to_slot(int seq, int32_t slot) override { tf_.state_to_device(seq, slot_at(slot)); }
  void slot_to_state(int32_t slot, int seq, int64_t len) override {
    tf_.state_from_device(seq, slot_at(slot), len);
  }
  void read_slot(int32_t slot, float* dst) override {
    cuda::copy_to_host(dst, slot_at(slot), tf_.state_bytes_per_seq());
  }
  int32_t capture_slots() const override { return tf_.capture_slots(); }
  void capture_export(int32_t c, float* dst) override { tf_.read_capture(c, dst); }
  void capture_to_slot(int32_t c, int32_t slot) override {
    tf_.capture_to_device(c, slot_at(slot));
  }

  void forward_batch(std::span<const RunnerStep> steps) override {
    batch_.clear();
    for (const RunnerStep& s : steps)
      batch_.push_back({s.seq, s.ids, s.n, s.pos0, s.logits, s.marks, s.n_marks, s.argmax});
    tf_.forward_batch(batch_);
  }

  RunnerStats stats() const override { return with_runtime(base_, tf_.runtime_stats()); }
  size_t weight_bytes() const override { return tf_.weight_bytes(); }
  size_t kv_bytes() const override {  // allocated once for every slot
    const ModelConfig& c = model_.config();
    return static_cast<size_t>(2 * attention_layers(c) * c.kv_dim() * tf_.capacity()) *
           max_seqs() * sizeof(float);
  }

 private:
  static CudaOffload with_host(CudaOffload o, const HostExperts* host) {
    o.experts = host;
    return o;
  }
  char* slot_at(int32_t slot) const {
    FT_CHECK(slot >= 0 && slot < n_slots_, "state slot {}", slot);
    return slots_.as<char>() + slot * tf_.state_bytes_per_seq();
  }
  const Model& model_;
  std::unique_ptr<HostExperts> host_;  // before tf_: the transformer reads it
  CudaTransformer tf_;
  RunnerStats base_;
  std::vector<CudaSeqStep> batch_;
  cuda::DeviceBuffer slots_;  // [n_slots_, state_bytes_per_seq] prefix-cache state snapshots
  int32_t n_slots_ = 0;
  std::vector<bool> open_ = std::vector<bool>(tf_.max_seqs(), false);
};

// Bytes of one sequence's recurrent state (CudaTransformer's layout: every DeltaNet layer's
// conv state [conv_dim, kernel - 1] and delta state [n_v_heads, k_head_dim, v_head_dim], f32).
size_t state_snapshot_bytes(const ModelConfig& c) {
  const DeltaNetConfig& d = c.delta;
  int64_t layers = 0;
  for (int64_t l = 0; l < c.n_layers; ++l) layers += c.is_delta(l);
  return static_cast<size_t>(layers) *
         (d.conv_dim() * (d.conv_kernel - 1) + d.n_v_heads * d.k_head_dim * d.v_head_dim) *
         sizeof(float);
}

}  // namespace

// "NVIDIA H200" from "NVIDIA H200, 139.8 GiB, sm_90": the profile's key.
std::string gpu_name() {
  const std::string s = cuda::device_summary();
  return s.substr(0, s.find(','));
}

std::string expert_format(const HostExperts& h) {
  switch (h.dtype) {
    case DType::BF16: return "bf16";
    case DType::F16: return "f16";
    case DType::F32: return "f32";
    default: return "other";
  }
}

std::optional<BwProfile> read_profile_or_warn(const BackendOptions& b) {
  try {
    return read_bw_profile(b.profile_path.empty() ? bw_profile_path() : b.profile_path);
  } catch (const Error& e) {
    FT_LOG_WARN("{}", e.what());
    return std::nullopt;
  }
}

std::unique_ptr<Runner> make_runner(const Model& model, EngineOptions& opt,
                                    const BackendOptions& b) {
  validate_backend_options(b);
  if (b.tensor_parallel > 1 || b.nnodes > 1) return make_tp_runner(model, opt, b);
  const MoeBackend requested = parse_moe_backend(b.moe_backend);
  const bool cuda = cuda::device_count() > 0;
  // The GPU KV cache: auto is bf16 (gpt-oss's sinks and windows too: checked against logits
  // computed with bf16 K/V, tests/cuda/model_checks.cpp).
  const DType kv_dtype = b.kv_dtype == "f32" ? DType::F32 : DType::BF16;
  const ModelConfig& mc = model.config();
  if (requested == MoeBackend::CPU || (requested == MoeBackend::AUTO && !cuda)) {
    FT_LOG_INFO("moe backend: cpu ({})",
                requested == MoeBackend::CPU ? "requested" : "auto: no CUDA device");
    return make_cpu_runner(model, opt.threads, opt.chunk, opt.max_running, opt.ctx_size);
  }
  // The budget: --gpu-memory needs no device to plan (so a refusal comes first); the ratio
  // is of the free VRAM measured now, before anything is allocated.
  size_t free_b = 0, total_b = 0;
  if (cuda) cuda::memory_info(&free_b, &total_b);
  size_t budget = 0;
  if (!b.gpu_memory.empty()) {
    budget = parse_size(b.gpu_memory);
  } else {
    if (!cuda) choose_moe_backend(requested, false, false, nullptr);  // throws: needs a device
    budget = static_cast<size_t>(b.memory_ratio * static_cast<double>(free_b));
  }
  // The prefix cache's VRAM snapshot tier comes off the budget first (at most half of it).
  const size_t snap_bytes = state_snapshot_bytes(model.config());
  const int32_t snap_slots = snapshot_vram_slots(b.state_snapshot_vram, snap_bytes, budget);
  budget -= snap_slots * snap_bytes;
  const GpuSeqLayout layout = gpu_seq_layout(opt, b);
  const HostExperts shape = HostExperts::shape_of(model);
  MemoryRequest req =
      cuda_offload_request(model, shape, layout.ctx, opt.chunk, budget, layout.seqs, kv_dtype);
  const int64_t all = shape.moe_layers * shape.n_experts;
  MemoryRequest all_req = req;  // fused: every expert resident
  all_req.slots_override = all;
  req.slots_override = b.moe_cache_size;
  req.cache_rate = b.moe_cache_rate;
  bool fits = b.moe_cache_size < 0 && b.moe_cache_rate < 0;  // auto honours explicit slots
  try {
    plan_memory(all_req);
  } catch (const Error&) {
    fits = false;
  }
  // An explicit backend's plan refuses with the numbers before the device is even needed.
  if (requested == MoeBackend::FUSED) plan_memory(all_req);
  if (requested == MoeBackend::OFFLOAD || requested == MoeBackend::HYBRID) plan_memory(req);
  std::optional<BwProfile> profile;
  if (cuda && (requested == MoeBackend::AUTO || requested == MoeBackend::HYBRID))
    profile = read_profile_or_warn(b);
  const BwEntry* entry = profile ? profile->find(gpu_name(), expert_format(shape)) : nullptr;
  const BackendChoice choice =
      choose_moe_backend(requested, cuda, fits, entry, mc.plain_swiglu_experts());
  const bool fused = choice.backend == MoeBackend::FUSED;
  const MemoryPlan plan = plan_memory(fused ? all_req : req);
  if (budget > free_b)
    fail("--gpu-memory {} is more than the {} free on {}; lower --gpu-memory or use "
         "--memory-ratio",
         gib(budget), gib(free_b), cuda::device_summary());
  RunnerStats base;
  base.backend = moe_backend_name(choice.backend);
  base.device = cuda::device_summary();
  base.memory_budget = budget;
  base.memory_planned = plan.used;
  base.expert_slots = plan.expert_slots;
  base.experts_total = all;
  base.kv_tokens = layout.ctx * layout.seqs;
  FT_LOG_INFO("moe backend: {} ({}); budget {} of {} free: {}", base.backend, choice.reason,
              gib(budget), gib(free_b), plan.summary());
  opt.ctx_size = layout.ctx;
  opt.max_running = layout.seqs;
  CudaOffload offload;
  std::unique_ptr<HostExperts> host;
  if (!fused) {
    FT_LOG_INFO("copying {} of experts into pinned host memory",
                gib(static_cast<size_t>(all) * shape.expert_bytes()));
    std::unique_ptr<ProgressBar> bar;  // ~58 GB for Qwen3-30B-A3B: a bar on stderr
    host = std::make_unique<HostExperts>(HostExperts::copy_of(model, [&](size_t d, size_t t) {
      if (!bar) bar = std::make_unique<ProgressBar>("pinning experts", t);
      bar->update(d);
    }));
    offload.slots = plan.expert_slots;
    // Fewer slots than one token's experts: the cache keeps a fixed share of them on probation
    // (experts/expert_cache.h) and every token fetches the rest, so decode runs far slower.
    const int64_t per_token = shape.moe_layers * model.config().top_k;
    if (plan.expert_slots < per_token)
      FT_LOG_WARN("{} expert slots hold fewer than the {} experts one token routes through "
                  "({} MoE layers x top-{}): decode fetches most of them every token; a smaller "
                  "--kv-reserve-tokens or a larger --gpu-memory leaves more slots",
                  plan.expert_slots, per_token, shape.moe_layers, model.config().top_k);
    if (choice.backend == MoeBackend::HYBRID) {
      offload.mode = MoeMode::HYBRID;
      if (choice.pcie_Bps > 0 && choice.cpu_Bps > 0) {
        offload.pcie_Bps = choice.pcie_Bps;
        offload.cpu_Bps = choice.cpu_Bps;
      }
      offload.cpu_threads = opt.threads;
      FT_LOG_INFO("hybrid split: PCIe {:.1f} GB/s vs CPU {:.1f} GB/s ({}), fetch fraction {:.3f}",
                  offload.pcie_Bps / 1e9, offload.cpu_Bps / 1e9,
                  choice.pcie_Bps > 0 ? "from the bw profile" : "defaults: run `ft bench bw`",
                  offload.pcie_Bps / (offload.pcie_Bps + offload.cpu_Bps));
    }
  }
  auto runner = std::make_unique<CudaRunner>(model, layout.ctx, opt.chunk, layout.seqs,
                                             std::move(host), offload, base, kv_dtype);
  if (snap_slots > 0) {
    runner->set_state_slots(snap_slots);
    FT_LOG_INFO("prefix cache: {} recurrent-state snapshots in VRAM ({})", snap_slots,
                gib(snap_slots * snap_bytes));
  }
  return runner;
}

}  // namespace ft
