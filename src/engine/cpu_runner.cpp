// CpuRunner: the whole model on the CPU thread pool, one KVCache per open sequence.
#include <fmt/format.h>

#include "backend/cpu/kernels.h"
#include "base/error.h"
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
  }
  void close(int seq) override { kv_.at(seq).reset(); }
  bool host_caches() const override { return true; }
  KVCache* host_kv(int seq) override { return kv_.at(seq).get(); }

  void forward_batch(std::span<const RunnerStep> steps) override {
    batch_.clear();
    for (const RunnerStep& s : steps) {
      FT_CHECK(s.seq >= 0 && s.seq < max_seqs() && kv_[s.seq], "slot {} is not open", s.seq);
      batch_.push_back({kv_[s.seq].get(), s.ids, s.n, s.pos0, s.logits});
    }
    tf_.forward_batch(batch_);
    ++stats_.steps;
  }

  RunnerStats stats() const override {
    RunnerStats s = stats_;
    s.kv_tokens = capacity_ * max_seqs();
    return s;
  }
  size_t weight_bytes() const override { return model_.matrix_bytes(); }
  size_t kv_bytes() const override {
    size_t b = 0;
    for (const auto& kv : kv_)
      if (kv) b += (kv->k.size() + kv->v.size()) * sizeof(float);
    return b;
  }

 private:
  const Model& model_;
  ThreadPool pool_;
  Transformer tf_;
  int64_t capacity_;
  std::vector<std::unique_ptr<KVCache>> kv_;  // [max_seqs]; null while the slot is free
  std::vector<SeqStep> batch_;
  RunnerStats stats_;
};
}  // namespace

std::unique_ptr<Runner> make_cpu_runner(const Model& model, int threads, int64_t max_chunk,
                                        int max_seqs, int64_t capacity) {
  return std::make_unique<CpuRunner>(model, threads, max_chunk, max_seqs, capacity);
}

}  // namespace ft
