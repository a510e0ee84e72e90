// The prefix cache's view of one runner slot: SeqCacheIO over Runner's export/import methods,
// so the engine's prefix cache has one code path for host (CPU) and device (CUDA) caches.
#pragma once
#include "cache/prefix_cache.h"
#include "engine/runner.h"

namespace ft {

class RunnerSeqIO : public SeqCacheIO {
 public:
  RunnerSeqIO(Runner& r, int seq) : r_(r), seq_(seq) {}
  void read_kv(int64_t pos0, int64_t n, float* k, float* v) override {
    r_.export_kv(seq_, pos0, n, k, v);
  }
  void write_kv(int64_t pos0, int64_t n, const float* k, const float* v) override {
    r_.import_kv(seq_, pos0, n, k, v);
  }
  int64_t state_floats() const override { return r_.state_floats(); }
  void read_state(float* dst) override { r_.export_state(seq_, dst); }
  void write_state(const float* src, int64_t len) override { r_.import_state(seq_, src, len); }
  void state_to_slot(int32_t slot) override { r_.state_to_slot(seq_, slot); }
  void slot_to_state(int32_t slot, int64_t len) override { r_.slot_to_state(slot, seq_, len); }
  void read_slot(int32_t slot, float* dst) override { r_.read_slot(slot, dst); }

 private:
  Runner& r_;
  int seq_;
};

// Saving the state a step captured at a mark: KV from the slot, the state from capture c.
class CaptureSeqIO : public RunnerSeqIO {
 public:
  CaptureSeqIO(Runner& r, int seq, int32_t capture) : RunnerSeqIO(r, seq), r_(r), c_(capture) {}
  void read_state(float* dst) override { r_.capture_export(c_, dst); }
  void state_to_slot(int32_t slot) override { r_.capture_to_slot(c_, slot); }

 private:
  Runner& r_;
  int32_t c_;
};

}  // namespace ft
