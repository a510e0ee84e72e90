// CpuRunner: the whole model on the CPU thread pool, one KVCache per open sequence.
#include <fmt/format.h>

#include <algorithm>

#include "backend/cpu/kernels.h"
#include "base/error.h"
#include "cache/prefix_cache.h"
#include "engine/runner.h"

namespace ft {

namespace {
class CpuRunner : public Runner {
 public:
  CpuRunner(const Model& model, int threads, int64_t max_chunk, int max_seqs, int64_t capacity)
      : model_(model), pool_(threads), tf_(model, pool_, max_chunk), capacity_(capacity),
        kv_(max_seqs) {
    stats_.device = fmt::format("cpu: {}, {} threads", cpu::kernels().isa, pool_.size());
  }

  int max_seqs() const override { return static_cast<int>(kv_.size()); }
  int64_t capacity() const override { return capacity_; }
  int64_t max_chunk() const override { return tf_.max_chunk(); }

  void open(int seq) override {
    FT_CHECK(seq >= 0 && seq < max_seqs() && !kv_[seq], "slot {}", seq);
    kv_[seq] = std::make_unique<KVCache>(model_.config(), capacity_);
    len_.resize(kv_.size(), 0);
    len_[seq] = 0;
  }
  void close(int seq) override { kv_.at(seq).reset(); }
  bool prefix_io() const override { return true; }
  void export_kv(int seq, int64_t pos0, int64_t n, float* k, float* v) override {
    io(seq).read_kv(pos0, n, k, v);
  }
  void import_kv(int seq, int64_t pos0, int64_t n, const float* k, const float* v) override {
    io(seq).write_kv(pos0, n, k, v);
  }
  int64_t state_floats() const override {
    const ModelConfig& c = model_.config();
    int64_t n = 0;
    for (int64_t l = 0; l < c.n_layers; ++l) n += c.is_delta(l);
    const DeltaNetConfig& d = c.delta;
    return n * (d.conv_dim() * (d.conv_kernel - 1) + d.n_v_heads * d.k_head_dim * d.v_head_dim);
  }
  void export_state(int seq, float* dst) override { io(seq).read_state(dst); }
  void import_state(int seq, const float* src, int64_t len) override {
    io(seq).write_state(src, len);
  }

  void forward_batch(std::span<const RunnerStep> steps) override {
    batch_.clear();
    const int64_t vocab = model_.config().vocab_size;
    for (size_t i = 0; i < steps.size(); ++i) {
      const RunnerStep& s = steps[i];
      FT_CHECK(s.seq >= 0 && s.seq < max_seqs() && kv_[s.seq], "slot {} is not open", s.seq);
      batch_.push_back({kv_[s.seq].get(), s.ids, s.n, s.pos0, argmax_.logits_for(s, i, vocab)});
      len_[s.seq] = std::max(len_[s.seq], s.pos0 + s.n);
    }
    tf_.forward_batch(batch_);
    argmax_.finish(steps, vocab);
    ++stats_.steps;
  }

  RunnerStats stats() const override {
    RunnerStats s = stats_;
    s.kv_tokens = capacity_ * max_seqs();
    return s;
  }
  // Elastic memory: the "kv" pool is every slot's capacity; a resize changes the capacity of
  // caches opened from now on (open caches are separate allocations and stay as they are).
  std::vector<PoolInfo> pools() const override {
    const ModelConfig& c = model_.config();
    size_t per_token = 0;  // k and v of every attention layer
    for (int64_t l = 0; l < c.n_layers; ++l)
      if (!c.is_delta(l)) per_token += 2 * c.kv_dim() * sizeof(float);
    int64_t used = 0;
    for (size_t s = 0; s < len_.size(); ++s)
      if (kv_[s]) used += len_[s];
    return {{.name = "kv", .unit = "tokens", .size = capacity_ * max_seqs(), .used = used,
             .min = 16 * max_seqs(), .max = 4 * initial_capacity_ * max_seqs(),
             .bytes = per_token * static_cast<size_t>(capacity_ * max_seqs()),
             .unit_bytes = per_token}};
  }
  void resize(const ResizeTarget& t) override {
    if (t.moe_slots >= 0) fail("the CPU backend has no expert cache to resize");
    if (t.kv_tokens >= 0) {
      FT_CHECK(t.kv_tokens / max_seqs() > 0, "kv_tokens {}", t.kv_tokens);
      capacity_ = t.kv_tokens / max_seqs();
    }
  }
  size_t weight_bytes() const override { return model_.matrix_bytes(); }
  size_t kv_bytes() const override {
    size_t b = 0;
    for (const auto& kv : kv_)
      if (kv) b += (kv->k.size() + kv->v.size()) * sizeof(float);
    return b;
  }

 private:
  KvCacheIO io(int seq) {
    FT_CHECK(seq >= 0 && seq < max_seqs() && kv_[seq], "slot {} is not open", seq);
    return KvCacheIO(model_.config(), *kv_[seq]);
  }

  const Model& model_;
  ThreadPool pool_;
  Transformer tf_;
  int64_t capacity_;
  int64_t initial_capacity_ = capacity_;
  std::vector<int64_t> len_;  // [max_seqs] tokens each open slot holds (pools' "used")
  std::vector<std::unique_ptr<KVCache>> kv_;  // [max_seqs]; null while the slot is free
  std::vector<SeqStep> batch_;
  HostArgmax argmax_;
  RunnerStats stats_;
};
}  // namespace

std::unique_ptr<Runner> make_cpu_runner(const Model& model, int threads, int64_t max_chunk,
                                        int max_seqs, int64_t capacity) {
  return std::make_unique<CpuRunner>(model, threads, max_chunk, max_seqs, capacity);
}

}  // namespace ft
