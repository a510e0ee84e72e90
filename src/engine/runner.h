// The engine's backend seam: one forward step over several sequences' tokens. CpuRunner runs
// the model on the CPU (Transformer + one KVCache per sequence); the CUDA runner
// (engine/cuda_runner.cpp, built only with the CUDA backend) runs CudaTransformer. The engine
// addresses sequences by slot index and never sees where the model runs.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/cpu/thread_pool.h"
#include "base/error.h"
#include "engine/sampler.h"
#include "model/transformer.h"

namespace ft {

// One sequence's part of a step: n tokens at positions pos0.. appended to slot seq's cache;
// logits [vocab] of the last token, or nullptr when not needed (a mid-prompt chunk). marks:
// n_marks ascending positions in (pos0, pos0 + n) where the runner captures the recurrent
// state (Runner::capture_slots), numbered in batch order from 0. argmax: where the last
// token's greedy id goes (ft::argmax of its logits; a greedy request without penalties or
// logprobs needs no more), or nullptr; the CUDA runner finds it on the device and leaves the
// logits row there when logits is null.
struct RunnerStep {
  int seq;
  const int32_t* ids;
  int64_t n;
  int64_t pos0;
  float* logits;
  const int64_t* marks = nullptr;
  int32_t n_marks = 0;
  int32_t* argmax = nullptr;
};

// For runners that find argmax on the host: a logits row for each step that asks only for its
// argmax (logits_for), and the ids once the pass has filled them (finish).
class HostArgmax {
 public:
  float* logits_for(const RunnerStep& s, size_t i, int64_t vocab) {
    if (s.logits || !s.argmax) return s.logits;
    if (rows_.size() <= i) rows_.resize(i + 1);
    rows_[i].resize(static_cast<size_t>(vocab));
    return rows_[i].data();
  }
  void finish(std::span<const RunnerStep> steps, int64_t vocab) {
    for (size_t i = 0; i < steps.size(); ++i)
      if (steps[i].argmax)
        *steps[i].argmax = argmax(steps[i].logits ? steps[i].logits : rows_[i].data(), vocab);
  }

 private:
  std::vector<std::vector<float>> rows_;
};

// Counters since start-up (cumulative) and the memory plan, for /v1/stats, /metrics and the
// periodic log line. The CPU runner reports zeros for the expert-offload fields.
struct RunnerStats {
  std::string backend = "cpu";  // cpu | fused | offload | hybrid
  std::string device;           // "cpu: avx512" or the GPU summary
  int64_t steps = 0;
  int64_t hits = 0, misses = 0;  // expert-cache lookups in decode
  int64_t fetched_experts = 0, cpu_experts = 0;
  int64_t probation_fetches = 0;  // fetched on probation: a pass's experts outnumber the slots
  size_t fetched_bytes = 0, streamed_bytes = 0;
  // Seconds spent per part of the steps (GPU: wall time the host observed per phase).
  double t_attention = 0, t_routing = 0, t_hits = 0, t_fetch = 0, t_cpu = 0;
  size_t memory_budget = 0;   // bytes the planner could use (0 on the CPU)
  size_t memory_planned = 0;  // bytes the plan allocates
  int64_t expert_slots = 0, experts_total = 0;
  int64_t kv_tokens = 0;      // KV capacity of all slots together
  double hit_rate() const { return hits + misses ? double(hits) / double(hits + misses) : 0.0; }
};

// One memory pool the engine can resize live (issue #9): the expert slot cache ("moe",
// slots), the sequences' KV ("kv", tokens of all slots together), the prefix cache's KV pages
// ("prefix_kv", tokens) and its recurrent-state snapshots ("state", snapshots). size/used/
// min/max in `unit`; bytes = size's memory.
struct PoolInfo {
  std::string name, unit;
  int64_t size = 0, used = 0, min = 0, max = 0;
  size_t bytes = 0;       // memory of `size` units
  size_t unit_bytes = 0;  // memory of one unit
  bool device = false;    // in the memory the watcher reads (device VRAM; host on the CPU)
};

// A live re-split: the new size of each pool, -1 = unchanged.
struct ResizeTarget {
  int64_t moe_slots = -1, kv_tokens = -1, prefix_tokens = -1, state_slots = -1;
  bool empty() const {
    return moe_slots < 0 && kv_tokens < 0 && prefix_tokens < 0 && state_slots < 0;
  }
};

class Runner {
 public:
  virtual ~Runner() = default;
  virtual int max_seqs() const = 0;         // sequence slots: seq in [0, max_seqs)
  virtual int64_t capacity() const = 0;     // tokens one sequence's cache holds
  virtual int64_t max_chunk() const = 0;    // most tokens in one step, all sequences together
  // A new sequence takes slot seq (its cache starts empty); close gives the slot back.
  virtual void open(int seq) = 0;
  virtual void close(int seq) = 0;
  // Runs every step's tokens together (total <= max_chunk()). Throws ft::Error for bad ids or
  // a cache overflow.
  virtual void forward_batch(std::span<const RunnerStep> steps) = 0;
  virtual RunnerStats stats() const = 0;
  virtual size_t weight_bytes() const = 0;
  virtual size_t kv_bytes() const = 0;  // bytes of KV cache held now
  // Prefix export/import, for the engine's prefix cache (on only where prefix_io() is true):
  // host copies of open slot seq's KV at positions [pos0, pos0 + n) of every attention layer,
  // k and v [n_attention_layers, n, kv_dim] f32 (layers in model order), and for hybrid models
  // the recurrent state after the tokens the slot holds: state_floats() floats in the runner's
  // own layout (opaque to the engine). import_state makes the slot hold len tokens, so its next
  // step starts at position len.
  virtual bool prefix_io() const { return false; }
  virtual void export_kv(int seq, int64_t pos0, int64_t n, float* k, float* v) { no_io(); }
  virtual void import_kv(int seq, int64_t pos0, int64_t n, const float* k, const float* v) {
    no_io();
  }
  virtual int64_t state_floats() const { return 0; }
  virtual void export_state(int seq, float* dst) { no_io(); }
  virtual void import_state(int seq, const float* src, int64_t len) { no_io(); }
  // The prefix cache's device tier of state snapshots (0 slots: none): slot copies of a
  // slot's recurrent state kept in device memory; restoring one is a device-to-device copy.
  virtual int32_t state_slots() const { return 0; }
  virtual void state_to_slot(int seq, int32_t slot) { no_io(); }
  virtual void slot_to_state(int32_t slot, int seq, int64_t len) { no_io(); }
  virtual void read_slot(int32_t slot, float* dst) { no_io(); }
  // In-pass state captures (hybrid models; 0: none, the engine then ends prefill chunks at
  // anchors): a step keeps a copy of the recurrent state at each of its marks, at most
  // capture_slots() in a step, numbered in batch order; capture c (valid until the next step)
  // to the host, or to a device-tier slot. An offloaded prefill then streams its experts once
  // for several anchors.
  virtual int32_t capture_slots() const { return 0; }
  virtual void capture_export(int32_t c, float* dst) { no_io(); }
  virtual void capture_to_slot(int32_t c, int32_t slot) { no_io(); }

  // Elastic memory (issue #9). pools(): the runner's resizable pools ("moe", "kv"); none by
  // default. resize() applies a target (validated by the engine against pools()) between
  // steps and throws ft::Error (OutOfMemory when an allocation failed) leaving every pool as
  // it was. A KV resize keeps every open sequence's cached tokens.
  virtual std::vector<PoolInfo> pools() const { return {}; }
  virtual void resize(const ResizeTarget& t) {
    if (t.moe_slots >= 0 || t.kv_tokens >= 0) fail("this backend has no resizable pools");
  }
  // Free and total device memory now (any thread); false where there is no device.
  virtual bool device_memory(size_t* free_bytes, size_t* total_bytes) const { return false; }

 private:
  [[noreturn]] static void no_io() { FT_CHECK(false, "this runner has no prefix export/import"); }
};

// The CPU runner: threads (0: one per core), max_chunk tokens per step, max_seqs slots whose
// caches (capacity tokens each) are allocated at open() and freed at close().
std::unique_ptr<Runner> make_cpu_runner(const Model& model, int threads, int64_t max_chunk,
                                        int max_seqs, int64_t capacity);

}  // namespace ft
