// Engine loop: admit waiting requests, build one batch step (decodes first, then prefill chunks
// in the remaining token budget), run it, sample, detokenize, apply stop rules, emit events.
#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "base/env.h"
#include "base/error.h"
#include "base/log.h"
#include "base/timer.h"
#include "engine/runner_io.h"
#include "tokenizer/detokenizer.h"

namespace ft {

struct Engine::Slot {
  std::shared_ptr<Request> req;
  Runner& runner;
  int seq;                      // the runner's slot (its KV cache)
  std::vector<int32_t> tokens;  // prompt + generated
  int64_t done = 0;             // tokens already in the KV cache
  int64_t prompt_len = 0;
  Sampler sampler;
  Detokenizer detok;
  std::string held;  // decoded text held back while it could still start a stop string
  std::vector<float> logits;
  std::vector<int32_t> counts;  // generated-token counts (penalties); empty when unused
  // Greedy with nothing that reads the logits (penalties, a processor, logprobs): the runner
  // returns the argmax id into next_id and the logits stay where they were computed.
  bool argmax_only = false;
  int32_t next_id = 0;
  Timer timer;
  double ttft = -1;
  bool restored = false;          // the prefix cache was consulted
  int64_t cached = 0;             // prompt tokens restored from the prefix cache
  std::vector<int64_t> cuts;      // anchor positions still ahead in the prompt
  size_t next_cut = 0;
  // This step's in-pass captures (hybrid, Runner::capture_slots): positions, capture indices.
  std::vector<int64_t> marks;
  std::vector<int32_t> mark_ids;

  Slot(std::shared_ptr<Request> r, const Tokenizer& tok, const ModelConfig& c, Runner& run,
       int seq)
      : req(std::move(r)), runner(run), seq(seq), tokens(req->prompt),
        prompt_len(static_cast<int64_t>(req->prompt.size())), sampler(req->sampling),
        detok(tok, req->skip_special), logits(c.vocab_size) {
    if (req->presence_penalty != 0 || req->frequency_penalty != 0) counts.assign(c.vocab_size, 0);
    static const bool device_argmax = env_on("FT_DEVICE_ARGMAX");  // 0: logits, for A/B runs
    argmax_only = device_argmax && req->sampling.temperature <= 0.f && counts.empty() &&
                  req->repetition_penalty == 1.f && !req->processor && req->top_logprobs < 0;
    runner.open(seq);
  }
  ~Slot() { runner.close(seq); }
};

Engine::Engine(std::unique_ptr<Model> model, std::unique_ptr<Tokenizer> tok, EngineOptions opt)
    : Engine(std::move(model), std::move(tok), opt, nullptr) {}

Engine::Engine(std::unique_ptr<Model> model, std::unique_ptr<Tokenizer> tok, EngineOptions opt,
               std::unique_ptr<Runner> runner)
    : model_(std::move(model)), tok_(std::move(tok)), opt_(opt), runner_(std::move(runner)) {
  if (!runner_)
    runner_ = make_cpu_runner(*model_, opt.threads, opt.chunk, opt.max_running, opt.ctx_size);
  opt_.max_running = std::min(opt_.max_running, runner_->max_seqs());
  opt_.ctx_size = std::min(opt_.ctx_size, runner_->capacity());
  opt_.chunk = std::min(opt_.chunk, runner_->max_chunk());
  for (int s = opt_.max_running - 1; s >= 0; --s) free_seqs_.push_back(s);
  for (int64_t id : model_->config().eos_token_ids) eos_ids_.push_back(static_cast<int32_t>(id));
  if (tok_->eos_id() >= 0 &&
      std::find(eos_ids_.begin(), eos_ids_.end(), tok_->eos_id()) == eos_ids_.end())
    eos_ids_.push_back(tok_->eos_id());
  stats_.weight_bytes = runner_->weight_bytes();
  const int64_t prefix_tokens =
      opt_.prefix_cache_tokens < 0 ? opt_.ctx_size : opt_.prefix_cache_tokens;
  if (prefix_tokens > 0 && runner_->prefix_io()) {
    constexpr int64_t page = 16;
    prefix_ = std::make_unique<PrefixCache>(
        model_->config(), PrefixCacheOptions{.page_tokens = page,
                                             .kv_pages = (prefix_tokens + page - 1) / page,
                                             .snapshot_bytes = opt_.prefix_snapshot_bytes,
                                             .device_snapshots = runner_->state_slots()});
    if (opt_.semantic_anchors) anchors_ = anchor_tokens(*tok_);
    stats_.prefix = prefix_->stats();
  }
  stats_.runner = runner_->stats();
  ctx_ = opt_.ctx_size;
  if (prefix_) {  // live-resize limits of the prefix pools: 4x the start-up size
    prefix_max_tokens_ = 4 * std::max(prefix_tokens, opt_.ctx_size * opt_.max_running);
    state_max_slots_ = 4 * std::max<int64_t>(
        16, static_cast<int64_t>(opt_.prefix_snapshot_bytes / prefix_->snapshot_unit_bytes()));
  }
  {
    size_t f = 0, t = 0;
    host_pools_watched_ = !runner_->device_memory(&f, &t);
  }
  pools_ = collect_pools({});
  if (const PoolInfo* p = find_pool(pools_, "moe")) want_.moe_slots = p->size;
  if (const PoolInfo* p = find_pool(pools_, "prefix_kv")) want_.prefix_tokens = p->size;
  thread_ = std::thread([this] { loop(); });
  size_t free_b = 0, total_b = 0;
  const bool probe = opt_.memory_probe ? opt_.memory_probe(&free_b, &total_b)
                                       : runner_->device_memory(&free_b, &total_b);
  if (opt_.elastic.on && probe) {
    {
      std::lock_guard lock(mu_);
      stats_.elastic.watching = true;
    }
    FT_LOG_INFO("elastic memory: on, floor {:.2f} GiB free of {:.2f} GiB, every {} ms",
                elastic_floor(opt_.elastic, total_b) / double(1 << 30), total_b / double(1 << 30),
                opt_.elastic.interval_ms);
    watcher_ = std::thread([this] { watch(); });
  }
}

Engine::~Engine() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  watch_cv_.notify_all();
  thread_.join();
  if (watcher_.joinable()) watcher_.join();
  for (auto& r : waiting_) {
    Event e;
    e.kind = Event::Kind::DONE;
    e.finish = FinishReason::CANCELLED;
    r->events.push(std::move(e));
  }
}

void Engine::submit(const std::shared_ptr<Request>& req) {
  const auto& c = model_->config();
  const int64_t n = static_cast<int64_t>(req->prompt.size());
  if (n == 0) throw RequestError(400, "the prompt is empty");
  for (int32_t id : req->prompt)
    if (id < 0 || id >= c.vocab_size)
      throw RequestError(400, fmt::format("token id {} is outside the vocabulary [0, {})", id,
                                          c.vocab_size));
  if (req->max_tokens < 1) throw RequestError(400, "max_tokens must be at least 1");
  const int64_t ctx = ctx_.load();
  if (n + req->max_tokens > ctx)
    throw RequestError(400, fmt::format(
        "this model's context is {} tokens, but the request needs {} ({} in the prompt, {} to "
        "generate); shorten the prompt or lower max_tokens", ctx, n + req->max_tokens,
        n, req->max_tokens));
  std::lock_guard lock(mu_);
  if (static_cast<int>(waiting_.size()) >= opt_.max_queue)
    throw RequestError(429, fmt::format("the server is busy ({} requests waiting); retry later",
                                        waiting_.size()));
  req->id = ++stats_.requests_total;
  waiting_.push_back(req);
  cv_.notify_one();
}

EngineStats Engine::stats() const {
  std::lock_guard lock(mu_);
  EngineStats s = stats_;
  s.uptime_s = uptime_.seconds();
  return s;
}

void Engine::reset_prefix_cache(bool semantic_anchors) {
  std::unique_lock lock(mu_);
  // Idle once the loop has published running == 0 after the last step (a finished request's
  // DONE event comes just before); it reads prefix_ again only for a later request.
  for (int i = 0; i < 10000 && stats_.running > 0; ++i) {
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    lock.lock();
  }
  FT_CHECK(stats_.running == 0 && waiting_.empty(), "reset_prefix_cache while requests run");
  opt_.semantic_anchors = semantic_anchors;
  if (!prefix_) return;
  prefix_->clear();
  anchors_ = semantic_anchors ? anchor_tokens(*tok_) : AnchorTokens{};
  stats_.prefix = prefix_->stats();
}

std::vector<RequestRecord> Engine::recent_requests() const {
  std::lock_guard lock(mu_);
  return {recent_.begin(), recent_.end()};
}

namespace {
void emit_done(Request& r, FinishReason why, const Usage& u, std::string stop = {},
               std::optional<int32_t> stop_id = {}) {
  Event e;
  e.kind = Event::Kind::DONE;
  e.finish = why;
  e.usage = u;
  e.matched_stop = std::move(stop);
  e.matched_stop_id = stop_id;
  r.events.push(std::move(e));
}

// Length of the longest suffix of s that is a proper prefix of some stop string.
size_t stop_prefix_hold(const std::string& s, const std::vector<std::string>& stops) {
  size_t hold = 0;
  for (const auto& st : stops)
    for (size_t k = std::min(st.size() - 1, s.size()); k > hold; --k)
      if (s.compare(s.size() - k, k, st, 0, k) == 0) {
        hold = k;
        break;
      }
  return hold;
}

// Keeps a UTF-8 cut from splitting a character: moves it left to a lead byte.
size_t utf8_floor(const std::string& s, size_t cut) {
  while (cut > 0 && cut < s.size() && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  return cut;
}

void apply_penalties(const Request& r, const std::vector<int32_t>& tokens,
                     const std::vector<int32_t>& counts, std::vector<float>& logits) {
  if (r.repetition_penalty != 1.f) {  // HF: every token seen in prompt or output, once
    std::vector<int32_t> seen(tokens);
    std::sort(seen.begin(), seen.end());
    seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
    for (int32_t id : seen) {
      float& l = logits[id];
      l = l > 0 ? l / r.repetition_penalty : l * r.repetition_penalty;
    }
  }
  if (!counts.empty())
    for (size_t id = 0; id < counts.size(); ++id)
      if (counts[id] > 0)
        logits[id] -= r.frequency_penalty * counts[id] + r.presence_penalty;
}

TokenLogprobs logprobs_of(const std::vector<float>& logits, int32_t chosen, int top) {
  const float mx = *std::max_element(logits.begin(), logits.end());
  double z = 0;
  for (float l : logits) z += std::exp(static_cast<double>(l - mx));
  const float lz = mx + static_cast<float>(std::log(z));
  TokenLogprobs out{chosen, logits[chosen] - lz, {}};
  if (top > 0) {
    std::vector<int32_t> idx(logits.size());
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int32_t>(i);
    const size_t k = std::min<size_t>(top, idx.size());
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    for (size_t i = 0; i < k; ++i) out.top.push_back({idx[i], logits[idx[i]] - lz});
  }
  return out;
}
}  // namespace

void Engine::loop() {
  std::vector<std::unique_ptr<Slot>> running;
  for (;;) {
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] {
        return stop_ || !waiting_.empty() || !running.empty() || !resizes_.empty();
      });
      if (stop_) break;
    }
    apply_resizes(running);  // the safe point: between steps, requests keep their slots
    {
      std::lock_guard lock(mu_);
      while (static_cast<int>(running.size()) < opt_.max_running && !waiting_.empty()) {
        auto req = std::move(waiting_.front());
        waiting_.pop_front();
        const int64_t need = static_cast<int64_t>(req->prompt.size()) + req->max_tokens;
        if (need > ctx_.load()) {  // the KV was resized below it after it was accepted
          Event e;
          e.kind = Event::Kind::DONE;
          e.finish = FinishReason::ERROR;
          e.error = fmt::format("the context shrank to {} tokens (a live KV resize) while the "
                                "request, which needs {}, waited; retry with fewer tokens",
                                ctx_.load(), need);
          req->events.push(std::move(e));
          ++stats_.requests_finished;
          continue;
        }
        const int seq = free_seqs_.back();
        free_seqs_.pop_back();
        running.push_back(std::make_unique<Slot>(std::move(req), *tok_, model_->config(),
                                                 *runner_, seq));
      }
      stats_.running = static_cast<int64_t>(running.size());
      stats_.waiting = static_cast<int64_t>(waiting_.size());
    }
    auto fail_batch = [&](const std::string& why) {
      for (auto& s : running) {
        Event ev;
        ev.kind = Event::Kind::DONE;
        ev.finish = FinishReason::ERROR;
        ev.error = why;
        s->req->events.push(std::move(ev));
      }
      release(running, running.begin());
    };
    try {
      try {
        step(running);
      } catch (const std::bad_alloc&) {
        throw OutOfMemory("host memory allocation failed");
      }
    } catch (const OutOfMemory& e) {
      // Out of memory: shrink the caches and run the step again (its tokens were not taken:
      // the KV positions it wrote are written again). A recurrent state cannot be rewound,
      // and a second failure fails the step's requests; the engine goes on either way.
      FT_LOG_WARN("out of memory in a step ({}): shrinking the caches", e.what());
      {
        std::lock_guard lock(mu_);
        ++stats_.elastic.oom_events;
      }
      bool ok = false;
      std::string why = fmt::format("out of memory: {}", e.what());
      if (shrink_after_oom(running) && !model_->config().has_delta()) {
        try {
          step(running);
          ok = true;
        } catch (const std::exception& e2) {
          why = fmt::format("out of memory: {}", e2.what());
        }
      }
      if (!ok) fail_batch(why + "; the engine shrank its caches, retry the request");
    } catch (const std::exception& e) {  // never take the server down: fail the batch
      FT_LOG_WARN("engine step failed: {}", e.what());
      fail_batch(e.what());
    }
    publish_pools(running);
    {
      std::lock_guard lock(mu_);
      stats_.running = static_cast<int64_t>(running.size());
      stats_.kv_bytes = runner_->kv_bytes();
      stats_.runner = runner_->stats();
      if (prefix_) stats_.prefix = prefix_->stats();
    }
    log_stats();
  }
  for (auto& s : running) emit_done(*s->req, FinishReason::CANCELLED, {});
  release(running, running.begin());
}

void Engine::release(std::vector<std::unique_ptr<Slot>>& running,
                     std::vector<std::unique_ptr<Slot>>::iterator from) {
  for (auto it = from; it != running.end(); ++it) free_seqs_.push_back((*it)->seq);
  running.erase(from, running.end());  // ~Slot closes the runner's slot
}

// Every stats_log_s seconds with work done: throughput since the last line, and for the GPU
// backends the expert-cache hit rate, PCIe bytes, CPU-computed experts and the time split.
void Engine::log_stats() {
  if (opt_.stats_log_s <= 0) return;
  EngineStats s;
  {
    std::lock_guard lock(mu_);
    s = stats_;
    s.uptime_s = uptime_.seconds();
  }
  if (s.uptime_s - last_log_s_ < opt_.stats_log_s || s.steps_total == logged_.steps_total) return;
  const double dt = s.uptime_s - last_log_s_;
  const RunnerStats &r = s.runner, &r0 = logged_.runner;
  std::string line = fmt::format(
      "stats: {:.1f} prefill tok/s, {:.1f} decode tok/s over {:.0f} s, {} running, {} waiting",
      (s.prompt_tokens_total - logged_.prompt_tokens_total) / dt,
      (s.generated_tokens_total - logged_.generated_tokens_total) / dt, dt, s.running, s.waiting);
  if (r.backend != "cpu") {
    const int64_t hits = r.hits - r0.hits, misses = r.misses - r0.misses;
    const double split = (r.t_attention - r0.t_attention) + (r.t_routing - r0.t_routing) +
                         (r.t_hits - r0.t_hits) + (r.t_fetch - r0.t_fetch) + (r.t_cpu - r0.t_cpu);
    auto pct = [&](double a, double b) { return 100 * (a - b) / split; };
    line += fmt::format("; {}: hit rate {:.1f}%, fetched {:.1f} MB ({} experts), {} experts on "
                        "the CPU",
                        r.backend, hits + misses ? 100.0 * hits / (hits + misses) : 0.0,
                        (r.fetched_bytes - r0.fetched_bytes) / 1e6,
                        r.fetched_experts - r0.fetched_experts, r.cpu_experts - r0.cpu_experts);
    if (r.probation_fetches > r0.probation_fetches)  // the slots hold less than a pass's experts
      line += fmt::format("; {} fetches on probation", r.probation_fetches - r0.probation_fetches);
    if (split > 0)  // 0 where the GPU replays captured graphs (no host-side timing)
      line += fmt::format("; time attention {:.0f}% routing {:.0f}% hits {:.0f}% fetch {:.0f}% "
                          "cpu {:.0f}%",
                          pct(r.t_attention, r0.t_attention), pct(r.t_routing, r0.t_routing),
                          pct(r.t_hits, r0.t_hits), pct(r.t_fetch, r0.t_fetch),
                          pct(r.t_cpu, r0.t_cpu));
  }
  FT_LOG_INFO("{}", line);
  last_log_s_ = s.uptime_s;
  logged_ = s;
}

void Engine::prefix_restore(Slot& s) {
  s.restored = true;
  if (!prefix_) return;
  RunnerSeqIO io(*runner_, s.seq);
  s.done = s.cached = prefix_->restore(s.tokens, io);
  s.cuts = thin_anchors(find_anchors(s.tokens, anchors_, opt_.anchor_every, s.done),
                        opt_.anchor_gap, s.done, static_cast<int64_t>(s.tokens.size()));
  std::lock_guard lock(mu_);
  stats_.cached_tokens_total += s.cached;
}

// Hybrid models snapshot their recurrent state where a chunk ends, so prefill chunks end at
// the anchors; attention-only models keep every position's KV, so anchors passed inside a
// chunk are recorded after it (fewer, longer chunks: offloaded prefill streams the experts
// once per chunk).
void Engine::prefix_save(Slot& s, bool at_end) {
  if (!prefix_ || s.done == 0) return;
  RunnerSeqIO io(*runner_, s.seq);
  if (!at_end) {
    bool anchor = false;
    while (s.next_cut < s.cuts.size() && s.cuts[s.next_cut] <= s.done) {
      const int64_t cut = s.cuts[s.next_cut++];
      const auto m = std::find(s.marks.begin(), s.marks.end(), cut);
      if (cut == s.done) {
        anchor = true;
      } else if (!prefix_->hybrid()) {
        prefix_->save(s.tokens, cut, io, true);
      } else if (m != s.marks.end()) {  // captured inside the step
        CaptureSeqIO cio(*runner_, s.seq, s.mark_ids[m - s.marks.begin()]);
        prefix_->save(s.tokens, cut, cio, true);
      }
    }
    if (s.done > s.prompt_len)  // decoding: after an `after` id (</think>, </tool_call>, ...)
      anchor = std::find(anchors_.after.begin(), anchors_.after.end(), s.tokens[s.done - 1]) !=
               anchors_.after.end();
    if (!anchor) return;
  }
  prefix_->save(s.tokens, s.done, io, true);
}

void Engine::step(std::vector<std::unique_ptr<Slot>>& running) {
  auto finish = [&](Slot& s, FinishReason why, std::string stop = {},
                    std::optional<int32_t> stop_id = {}) {
    prefix_save(s, true);
    Usage u{s.prompt_len, static_cast<int64_t>(s.tokens.size()) - s.prompt_len, s.cached};
    emit_done(*s.req, why, u, std::move(stop), stop_id);
    std::lock_guard lock(mu_);
    ++stats_.requests_finished;
    if (why == FinishReason::CANCELLED) ++stats_.requests_cancelled;
    recent_.push_front({s.req->id, s.req->label, u.prompt_tokens, u.completion_tokens,
                        finish_reason_name(why), s.ttft, s.timer.seconds()});
    if (recent_.size() > 64) recent_.pop_back();
  };
  // Cancelled requests leave before the step, freeing their slot.
  release(running, std::stable_partition(running.begin(), running.end(), [&](auto& s) {
    if (!s->req->cancelled.load()) return true;
    finish(*s, FinishReason::CANCELLED);
    return false;
  }));
  if (running.empty()) return;
  for (auto& s : running)
    if (!s->restored) prefix_restore(*s);
  // Decodes first (one token each), then prefill chunks in the remaining budget.
  std::vector<RunnerStep> batch;
  std::vector<Slot*> members;
  int64_t budget = opt_.chunk, prefill = 0, decode = 0;
  // Hybrid prefills snapshot their state at anchors: inside the chunk where the runner captures
  // it (up to capture_slots() per step), else the chunk ends at the anchor.
  const int32_t captures = prefix_ && prefix_->hybrid() ? runner_->capture_slots() : 0;
  int32_t captured = 0;
  for (auto& s : running) s->marks.clear(), s->mark_ids.clear();
  for (auto& s : running)
    if (static_cast<int64_t>(s->tokens.size()) - s->done == 1 && s->done >= s->prompt_len) {
      batch.push_back({s->seq, s->tokens.data() + s->done, 1, s->done,
                       s->argmax_only ? nullptr : s->logits.data()});
      if (s->argmax_only) batch.back().argmax = &s->next_id;
      members.push_back(s.get());
      --budget;
      ++decode;
    }
  for (auto& s : running) {
    const int64_t left = static_cast<int64_t>(s->tokens.size()) - s->done;
    if (s->done >= s->prompt_len || budget <= 0) continue;
    int64_t n = std::min(left, budget);
    if (s->next_cut < s->cuts.size() && prefix_->hybrid()) {
      size_t c = s->next_cut;
      for (; c < s->cuts.size() && s->cuts[c] < s->done + n && captured < captures; ++c) {
        s->marks.push_back(s->cuts[c]);
        s->mark_ids.push_back(captured++);
      }
      if (c < s->cuts.size()) n = std::min(n, s->cuts[c] - s->done);
    }
    const bool last = n == left;
    batch.push_back({s->seq, s->tokens.data() + s->done, n, s->done,
                     last && !s->argmax_only ? s->logits.data() : nullptr, s->marks.data(),
                     static_cast<int32_t>(s->marks.size()),
                     last && s->argmax_only ? &s->next_id : nullptr});
    members.push_back(s.get());
    budget -= n;
    prefill += n;
  }
  Timer t;
  runner_->forward_batch(batch);
  const double dt = t.seconds();
  {
    std::lock_guard lock(mu_);
    ++stats_.steps_total;
    stats_.prompt_tokens_total += prefill;
    stats_.generated_tokens_total += decode;
    constexpr double a = 0.2;  // exponential moving averages of recent throughput
    if (decode > 0) stats_.decode_tokens_per_s = (1 - a) * stats_.decode_tokens_per_s + a * decode / dt;
    if (prefill > 0) stats_.prefill_tokens_per_s = (1 - a) * stats_.prefill_tokens_per_s + a * prefill / dt;
  }
  std::vector<Slot*> ended;
  for (size_t b = 0; b < batch.size(); ++b) {
    Slot& s = *members[b];
    s.done += batch[b].n;
    prefix_save(s, false);
    if (!batch[b].logits && !batch[b].argmax) continue;  // mid-prompt chunk
    Request& r = *s.req;
    int32_t id = s.next_id;
    if (!s.argmax_only) {
      apply_penalties(r, s.tokens, s.counts, s.logits);
      if (r.processor)
        r.processor->process(s.logits, std::span<const int32_t>(s.tokens).subspan(s.prompt_len));
      id = s.sampler.sample(s.logits.data(), static_cast<int64_t>(s.logits.size()));
    }
    if (s.ttft < 0) s.ttft = s.timer.seconds();
    s.tokens.push_back(id);
    if (!s.counts.empty()) ++s.counts[id];
    const int64_t generated = static_cast<int64_t>(s.tokens.size()) - s.prompt_len;
    Event ev;
    if (r.top_logprobs >= 0) ev.logprobs.push_back(logprobs_of(s.logits, id, r.top_logprobs));
    ev.ids.push_back(id);
    const bool is_eos = !r.ignore_eos && std::find(eos_ids_.begin(), eos_ids_.end(), id) != eos_ids_.end();
    const bool is_stop_id = std::find(r.stop_ids.begin(), r.stop_ids.end(), id) != r.stop_ids.end();
    if (is_eos || is_stop_id) {
      std::string rest = s.held + s.detok.flush();
      if (!rest.empty() || !ev.logprobs.empty()) {
        ev.text = std::move(rest);
        r.events.push(std::move(ev));
      }
      finish(s, FinishReason::STOP, {}, id);
      ended.push_back(&s);
      continue;
    }
    s.held += s.detok.feed(id);
    const bool at_limit = generated >= r.max_tokens;
    if (at_limit) s.held += s.detok.flush();
    // Stop strings: cut at the earliest match; otherwise hold back a possible match's start.
    size_t cut = std::string::npos;
    std::string matched;
    for (const auto& st : r.stop) {
      size_t p = st.empty() ? std::string::npos : s.held.find(st);
      if (p < cut) cut = p, matched = st;
    }
    if (cut != std::string::npos) {
      ev.text = s.held.substr(0, cut);
      r.events.push(std::move(ev));
      finish(s, FinishReason::STOP, matched);
      ended.push_back(&s);
      continue;
    }
    size_t emit = at_limit ? s.held.size()
                           : utf8_floor(s.held, s.held.size() - stop_prefix_hold(s.held, r.stop));
    ev.text = s.held.substr(0, emit);
    s.held.erase(0, emit);
    r.events.push(std::move(ev));
    if (at_limit || static_cast<int64_t>(s.tokens.size()) >= opt_.ctx_size) {
      finish(s, FinishReason::LENGTH);
      ended.push_back(&s);
    }
  }
  release(running, std::stable_partition(running.begin(), running.end(), [&](auto& s) {
    return std::find(ended.begin(), ended.end(), s.get()) == ended.end();
  }));
}


// ---- Elastic memory (issue #9) ----

std::vector<PoolInfo> Engine::collect_pools(
    const std::vector<std::unique_ptr<Slot>>& running) const {
  std::vector<PoolInfo> pools = runner_->pools();
  for (PoolInfo& p : pools) {
    if (p.name != "kv") continue;
    // A KV resize may not cut a running request: each slot must still hold prompt + output.
    int64_t need = 0;
    for (const auto& s : running)
      need = std::max(need, s->prompt_len + s->req->max_tokens);
    p.min = std::max(p.min, need * runner_->max_seqs());
  }
  if (prefix_) {
    const PrefixCacheStats s = prefix_->stats();
    const size_t page = prefix_->page_bytes(), unit = prefix_->snapshot_unit_bytes();
    pools.push_back({.name = "prefix_kv", .unit = "tokens",
                     .size = s.pages_total * s.page_tokens, .used = s.pages_used * s.page_tokens,
                     .min = 0, .max = prefix_max_tokens_, .bytes = s.kv_bytes,
                     .unit_bytes = page / static_cast<size_t>(s.page_tokens),
                     .device = host_pools_watched_});
    pools.push_back({.name = "state", .unit = "snapshots",
                     .size = static_cast<int64_t>(s.snapshot_budget / unit),
                     .used = static_cast<int64_t>((s.snapshot_bytes + unit - 1) / unit),
                     .min = 0, .max = state_max_slots_, .bytes = s.snapshot_budget,
                     .unit_bytes = unit, .device = host_pools_watched_});
  }
  return pools;
}

void Engine::publish_pools(const std::vector<std::unique_ptr<Slot>>& running) {
  std::vector<PoolInfo> p = collect_pools(running);
  std::lock_guard lock(mu_);
  pools_ = std::move(p);
}

std::vector<PoolInfo> Engine::pools() const {
  std::lock_guard lock(mu_);
  return pools_;
}

int64_t Engine::submit_resize(const ResizeTarget& t, const std::string& source) {
  std::lock_guard lock(mu_);
  try {
    check_resize_target(pools_, t, stats_.runner.memory_budget, stats_.runner.memory_planned);
  } catch (const Error& e) {
    throw RequestError(400, e.what());
  }
  const int64_t id = ++next_resize_id_;
  resizes_.push_back({id, t, source});
  ResizeResult queued;
  queued.id = id;
  queued.source = source;
  results_[id] = queued;
  while (results_.size() > 256) results_.erase(results_.begin());
  stats_.elastic.pending = static_cast<int64_t>(resizes_.size());
  cv_.notify_all();
  return id;
}

ResizeResult Engine::resize_result(int64_t id, double wait_s) const {
  std::unique_lock lock(mu_);
  auto done = [&] {
    auto it = results_.find(id);
    return it == results_.end() || it->second.done;
  };
  if (wait_s > 0)
    resize_cv_.wait_for(lock, std::chrono::duration<double>(wait_s), done);
  auto it = results_.find(id);
  return it == results_.end() ? ResizeResult{} : it->second;
}

namespace {
std::string describe(const ResizeTarget& t) {
  std::string s;
  auto add = [&](const char* name, int64_t v) {
    if (v >= 0) s += fmt::format("{}{} {}", s.empty() ? "" : ", ", name, v);
  };
  add("moe slots", t.moe_slots);
  add("kv tokens", t.kv_tokens);
  add("prefix tokens", t.prefix_tokens);
  add("state snapshots", t.state_slots);
  return s;
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
}
}  // namespace

void Engine::apply_resize(const ResizeTarget& t,
                          const std::vector<std::unique_ptr<Slot>>& running) {
  // Validated again here: the pools and the running requests may have changed since submit.
  const std::vector<PoolInfo> now = collect_pools(running);
  RunnerStats rs = runner_->stats();
  check_resize_target(now, t, rs.memory_budget, rs.memory_planned);
  const PrefixCacheStats before = prefix_ ? prefix_->stats() : PrefixCacheStats{};
  if (prefix_ && (t.prefix_tokens >= 0 || t.state_slots >= 0)) {
    const int64_t P = prefix_->page_tokens();
    prefix_->resize(t.prefix_tokens < 0 ? -1 : (t.prefix_tokens + P - 1) / P,
                    t.state_slots < 0 ? -1
                                      : t.state_slots *
                                            static_cast<int64_t>(prefix_->snapshot_unit_bytes()));
  }
  if (t.moe_slots >= 0 || t.kv_tokens >= 0) {
    ResizeTarget r = t;
    r.prefix_tokens = r.state_slots = -1;
    try {
      runner_->resize(r);
    } catch (...) {  // put the prefix pools' sizes back (their evicted entries stay dropped)
      if (prefix_) {
        try {
          prefix_->resize(before.pages_total, static_cast<int64_t>(before.snapshot_budget));
        } catch (const std::exception& e) {
          FT_LOG_WARN("resize rollback of the prefix cache failed: {}", e.what());
        }
      }
      throw;
    }
    if (t.kv_tokens >= 0) ctx_ = runner_->capacity();
  }
}

void Engine::apply_resizes(std::vector<std::unique_ptr<Slot>>& running) {
  std::deque<QueuedResize> queue;
  {
    std::lock_guard lock(mu_);
    queue.swap(resizes_);
  }
  for (const QueuedResize& q : queue) {
    Timer timer;
    ResizeResult r;
    r.id = q.id;
    r.done = true;
    r.source = q.source;
    try {
      apply_resize(q.target, running);
      r.ok = true;
    } catch (const std::exception& e) {
      r.error = e.what();
    }
    r.seconds = timer.seconds();
    publish_pools(running);
    if (r.ok)
      FT_LOG_INFO("resize {} ({}): {} applied in {:.1f} ms", q.id, q.source, describe(q.target),
                  r.seconds * 1e3);
    else
      FT_LOG_WARN("resize {} ({}): {} refused: {}", q.id, q.source, describe(q.target), r.error);
    std::lock_guard lock(mu_);
    results_[q.id] = r;
    ElasticStats& e = stats_.elastic;
    if (r.ok) {
      ++e.resizes;
      if (q.source.ends_with("shrink")) ++e.shrinks;
      if (q.source.ends_with("grow")) ++e.grows;
      if (q.source == "api") {  // the operator's sizes are what the watcher grows back to
        if (q.target.moe_slots >= 0) want_.moe_slots = q.target.moe_slots;
        if (q.target.prefix_tokens >= 0)
          if (const PoolInfo* p = find_pool(pools_, "prefix_kv")) want_.prefix_tokens = p->size;
      }
      resize_times_.push_back(r.seconds);
      if (resize_times_.size() > 1024) resize_times_.erase(resize_times_.begin());
      e.last_resize_s = r.seconds;
      e.resize_p50_s = percentile(resize_times_, 0.5);
      e.resize_p99_s = percentile(resize_times_, 0.99);
      last_change_s_ = uptime_.seconds();
    } else {
      ++e.resize_failures;
      e.last_error = r.error;
    }
    stats_.runner = runner_->stats();
    if (prefix_) stats_.prefix = prefix_->stats();
    stats_.kv_bytes = runner_->kv_bytes();
  }
  std::lock_guard lock(mu_);
  stats_.elastic.pending = static_cast<int64_t>(resizes_.size());
  if (!queue.empty()) resize_cv_.notify_all();
}

bool Engine::shrink_after_oom(std::vector<std::unique_ptr<Slot>>& running) {
  const std::vector<PoolInfo> pools = collect_pools(running);
  ResizeTarget t;
  const PoolInfo* moe = find_pool(pools, "moe");
  const PoolInfo* pkv = find_pool(pools, "prefix_kv");
  if (moe && moe->size > moe->min)
    t.moe_slots = std::max(moe->min, moe->size / 2);
  else if (pkv && pkv->size > pkv->min)
    t.prefix_tokens = std::max(pkv->min, pkv->size / 2);
  else
    return false;
  {
    std::lock_guard lock(mu_);
    resizes_.push_front({++next_resize_id_, t, "oom-shrink"});
  }
  apply_resizes(running);
  return true;
}

void Engine::watch() {
  const ElasticOptions& o = opt_.elastic;
  for (;;) {
    {
      std::unique_lock lock(mu_);
      watch_cv_.wait_for(lock, std::chrono::milliseconds(o.interval_ms), [&] { return stop_; });
      if (stop_) return;
    }
    size_t free_b = 0, total_b = 0;
    const bool ok = opt_.memory_probe ? opt_.memory_probe(&free_b, &total_b)
                                      : runner_->device_memory(&free_b, &total_b);
    if (!ok) continue;
    const size_t floor = elastic_floor(o, total_b), margin = elastic_margin(o, floor);
    std::vector<PoolInfo> pools;
    ElasticWant want;
    double since = 0;
    {
      std::lock_guard lock(mu_);
      stats_.elastic.free_bytes = free_b;
      stats_.elastic.total_bytes = total_b;
      stats_.elastic.floor_bytes = floor;
      if (!resizes_.empty()) continue;  // let the queued change land first
      pools = pools_;
      want = want_;
      since = uptime_.seconds() - last_change_s_;
    }
    const std::optional<ResizeTarget> t = elastic_decide(free_b, floor, margin, pools, want);
    if (!t) continue;
    const PoolInfo* moe = find_pool(pools, "moe");
    const bool grow = (t->moe_slots >= 0 && moe && t->moe_slots > moe->size) ||
                      (t->moe_slots < 0 && t->prefix_tokens >= 0 &&
                       t->prefix_tokens > find_pool(pools, "prefix_kv")->size);
    if (grow && since < o.grow_cooldown_s) continue;
    FT_LOG_INFO("elastic: {:.2f} GiB free (floor {:.2f} GiB): {} to {}", free_b / double(1 << 30),
                floor / double(1 << 30), grow ? "grow" : "shrink", describe(*t));
    try {
      submit_resize(*t, grow ? "elastic-grow" : "elastic-shrink");
    } catch (const RequestError& e) {
      FT_LOG_WARN("elastic: {}", e.what());
    }
  }
}

}  // namespace ft
