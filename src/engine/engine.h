// The engine: one thread owns the model and steps all running requests together (continuous
// batching, chunked prefill mixed with decodes). HTTP threads only submit and read events.
#pragma once
#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "cache/prefix_cache.h"
#include "engine/anchors.h"
#include "engine/elastic.h"
#include "engine/request.h"
#include "engine/runner.h"
#include "base/timer.h"
#include "tokenizer/tokenizer.h"

namespace ft {

struct EngineOptions {
  int max_running = 4;        // sequences decoded together
  int max_queue = 64;         // waiting requests beyond which submit() answers 429
  int64_t ctx_size = 4096;    // tokens per sequence (prompt + generation)
  int64_t chunk = 256;        // tokens per engine step (prefill chunks share it with decodes)
  int threads = 0;            // CPU threads (0: one per core)
  double stats_log_s = 60;    // seconds between periodic stats log lines (0: never)
  // Prefix cache (CPU runner): KV tokens kept across requests (-1: one context, 0: off), the
  // recurrent-state snapshot budget, and the checkpoint interval of long prefills.
  int64_t prefix_cache_tokens = -1;
  size_t prefix_snapshot_bytes = size_t(256) << 20;
  int64_t anchor_every = 512;
  bool semantic_anchors = true;  // false: checkpoints only every anchor_every and at the end
  int64_t anchor_gap = 0;        // thin_anchors: drop anchors closer than this (0: keep all)
  // Elastic memory (issue #9): the free-memory watcher (on where the runner has a device or
  // memory_probe is set: a test hook reading "free/total device memory").
  ElasticOptions elastic;
  std::function<bool(size_t*, size_t*)> memory_probe;
};

// A request the engine refuses, with the HTTP status it maps to (400 never fits, 429 busy).
struct RequestError : std::runtime_error {
  RequestError(int status, const std::string& msg) : std::runtime_error(msg), status(status) {}
  int status;
};

// Live resizes and the pressure watcher, for /v1/stats and /metrics.
struct ElasticStats {
  bool watching = false;           // the watcher thread runs
  int64_t resizes = 0, resize_failures = 0, pending = 0;
  int64_t shrinks = 0, grows = 0;  // applied by the watcher (pressure) or after an OOM
  int64_t oom_events = 0;          // steps that ran out of memory
  double last_resize_s = 0, resize_p50_s = 0, resize_p99_s = 0;  // time to apply, seconds
  std::string last_error;          // of the last refused or failed resize
  size_t free_bytes = 0, total_bytes = 0, floor_bytes = 0;  // the watcher's last reading
};

// A queued resize: done once the engine thread applied (ok) or refused it (error).
struct ResizeResult {
  int64_t id = 0;
  bool done = false, ok = false;
  std::string error, source;
  double seconds = 0;  // time to apply
};

struct EngineStats {
  int64_t running = 0, waiting = 0;
  int64_t requests_total = 0, requests_finished = 0, requests_cancelled = 0;
  int64_t prompt_tokens_total = 0, generated_tokens_total = 0, steps_total = 0;
  double decode_tokens_per_s = 0;   // recent, over the last few seconds
  double prefill_tokens_per_s = 0;
  double uptime_s = 0;
  size_t kv_bytes = 0, weight_bytes = 0;
  int64_t cached_tokens_total = 0;  // prompt tokens served from the prefix cache
  PrefixCacheStats prefix;          // occupancy of the prefix cache (zeros when off)
  RunnerStats runner;  // backend, expert-cache counters, time split, memory plan
  ElasticStats elastic;
};

// Summary of a finished request for GET /v1/requests.
struct RequestRecord {
  int64_t id;
  std::string label;
  int64_t prompt_tokens, completion_tokens;
  std::string finish;
  double ttft_s, total_s;
};

class Engine {
 public:
  // Runs the model on the CPU (make_cpu_runner with opt's threads, chunk, ctx_size).
  Engine(std::unique_ptr<Model> model, std::unique_ptr<Tokenizer> tok, EngineOptions opt);
  // Runs the model on `runner`, which must have been made over *model. max_running, ctx_size
  // and chunk are capped by the runner's slots, capacity and max_chunk.
  Engine(std::unique_ptr<Model> model, std::unique_ptr<Tokenizer> tok, EngineOptions opt,
         std::unique_ptr<Runner> runner);
  ~Engine();  // stops the loop; running requests end with FinishReason::CANCELLED

  // Validates and enqueues; throws RequestError (400: can never fit the context or bad ids;
  // 429: the wait queue is full). Events then arrive on req->events.
  void submit(const std::shared_ptr<Request>& req);

  EngineStats stats() const;
  // Empties the prefix cache and sets whether semantic anchors are used (benchmarks comparing
  // both on one engine). Only while idle: every submitted request has finished.
  void reset_prefix_cache(bool semantic_anchors);
  // Live re-split (issue #9): validates t against the pools' limits and the budget at once
  // (RequestError 400 naming the limit), then queues it; the engine thread applies it at its
  // next safe point between steps, while requests run. Returns the resize's id.
  int64_t submit_resize(const ResizeTarget& t, const std::string& source = "api");
  // The state of resize id, waiting up to wait_s seconds for it to be applied.
  ResizeResult resize_result(int64_t id, double wait_s) const;
  // Every pool (runner's and prefix cache's) as of the last step or resize.
  std::vector<PoolInfo> pools() const;
  // Tokens one request may use now (follows live KV resizes).
  int64_t ctx_size() const { return ctx_.load(); }
  std::vector<RequestRecord> recent_requests() const;  // newest first, at most 64
  const Tokenizer& tokenizer() const { return *tok_; }
  const Model& model() const { return *model_; }
  const EngineOptions& options() const { return opt_; }
  std::vector<int32_t> eos_ids() const { return eos_ids_; }

 private:
  struct Slot;
  void loop();
  void step(std::vector<std::unique_ptr<Slot>>& running);
  void log_stats();
  // Elastic memory: the engine thread's pools, applying queued resizes between steps, the
  // shrink after an out-of-memory step, and the watcher thread.
  std::vector<PoolInfo> collect_pools(const std::vector<std::unique_ptr<Slot>>& running) const;
  void apply_resizes(std::vector<std::unique_ptr<Slot>>& running);
  void apply_resize(const ResizeTarget& t, const std::vector<std::unique_ptr<Slot>>& running);
  bool shrink_after_oom(std::vector<std::unique_ptr<Slot>>& running);
  void publish_pools(const std::vector<std::unique_ptr<Slot>>& running);
  void watch();
  // Prefix cache: restore a new slot's prompt prefix; record the slot at an anchor or its end.
  void prefix_restore(Slot& s);
  void prefix_save(Slot& s, bool at_end);
  // Gives the runner slots of running[from..) back and drops those sequences.
  void release(std::vector<std::unique_ptr<Slot>>& running,
               std::vector<std::unique_ptr<Slot>>::iterator from);

  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tok_;
  EngineOptions opt_;
  std::vector<int32_t> eos_ids_;
  std::unique_ptr<Runner> runner_;
  std::unique_ptr<PrefixCache> prefix_;  // null when off (engine thread only)
  AnchorTokens anchors_;
  std::vector<int> free_seqs_;  // runner slots not in use (engine thread only)
  Timer uptime_;
  double last_log_s_ = 0;
  EngineStats logged_;          // stats at the last periodic log line

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Request>> waiting_;
  bool stop_ = false;
  EngineStats stats_;
  std::deque<RequestRecord> recent_;
  // Elastic memory (under mu_ unless noted).
  struct QueuedResize {
    int64_t id;
    ResizeTarget target;
    std::string source;
  };
  std::deque<QueuedResize> resizes_;
  std::map<int64_t, ResizeResult> results_;  // the last 256
  int64_t next_resize_id_ = 0;
  mutable std::condition_variable resize_cv_;
  std::condition_variable watch_cv_;  // wakes the watcher to stop
  int64_t prefix_max_tokens_ = 0, state_max_slots_ = 0;
  bool host_pools_watched_ = true;  // no device: the watcher's memory is the host's
  std::vector<PoolInfo> pools_;
  ElasticWant want_;              // sizes the watcher grows back to
  std::vector<double> resize_times_;  // apply seconds, the last 1024
  double last_change_s_ = -1e9;   // uptime of the last applied resize
  std::atomic<int64_t> ctx_{0};
  std::thread thread_;
  std::thread watcher_;
};

}  // namespace ft
