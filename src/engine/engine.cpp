// Engine loop: admit waiting requests, build one batch step (decodes first, then prefill chunks
// in the remaining token budget), run it, sample, detokenize, apply stop rules, emit events.
#include "engine/engine.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "base/log.h"
#include "base/timer.h"
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
  Timer timer;
  double ttft = -1;
  bool restored = false;          // the prefix cache was consulted
  int64_t cached = 0;             // prompt tokens restored from the prefix cache
  std::vector<int64_t> cuts;      // anchor positions still ahead in the prompt
  size_t next_cut = 0;

  Slot(std::shared_ptr<Request> r, const Tokenizer& tok, const ModelConfig& c, Runner& run,
       int seq)
      : req(std::move(r)), runner(run), seq(seq), tokens(req->prompt),
        prompt_len(static_cast<int64_t>(req->prompt.size())), sampler(req->sampling),
        detok(tok, req->skip_special), logits(c.vocab_size) {
    if (req->presence_penalty != 0 || req->frequency_penalty != 0) counts.assign(c.vocab_size, 0);
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
  if (prefix_tokens > 0 && runner_->host_caches()) {
    constexpr int64_t page = 16;
    prefix_ = std::make_unique<PrefixCache>(
        model_->config(), PrefixCacheOptions{.page_tokens = page,
                                             .kv_pages = (prefix_tokens + page - 1) / page,
                                             .snapshot_bytes = opt_.prefix_snapshot_bytes});
    anchors_ = anchor_tokens(*tok_);
    stats_.prefix = prefix_->stats();
  }
  stats_.runner = runner_->stats();
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
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
  if (n + req->max_tokens > opt_.ctx_size)
    throw RequestError(400, fmt::format(
        "this model's context is {} tokens, but the request needs {} ({} in the prompt, {} to "
        "generate); shorten the prompt or lower max_tokens", opt_.ctx_size, n + req->max_tokens,
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
      cv_.wait(lock, [&] { return stop_ || !waiting_.empty() || !running.empty(); });
      if (stop_) break;
      while (static_cast<int>(running.size()) < opt_.max_running && !waiting_.empty()) {
        auto req = std::move(waiting_.front());
        waiting_.pop_front();
        const int seq = free_seqs_.back();
        free_seqs_.pop_back();
        running.push_back(std::make_unique<Slot>(std::move(req), *tok_, model_->config(),
                                                 *runner_, seq));
      }
      stats_.running = static_cast<int64_t>(running.size());
      stats_.waiting = static_cast<int64_t>(waiting_.size());
    }
    try {
      step(running);
    } catch (const std::exception& e) {  // never take the server down: fail the batch
      FT_LOG_WARN("engine step failed: {}", e.what());
      for (auto& s : running) {
        Event ev;
        ev.kind = Event::Kind::DONE;
        ev.finish = FinishReason::ERROR;
        ev.error = e.what();
        s->req->events.push(std::move(ev));
      }
      release(running, running.begin());
    }
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
  KVCache* kv = runner_->host_kv(s.seq);
  if (!prefix_ || !kv) return;
  s.done = s.cached = prefix_->restore(s.tokens, *kv);
  s.cuts = find_anchors(s.tokens, anchors_, opt_.anchor_every, s.done);
  std::lock_guard lock(mu_);
  stats_.cached_tokens_total += s.cached;
}

void Engine::prefix_save(Slot& s, bool at_end) {
  KVCache* kv = runner_->host_kv(s.seq);
  if (!prefix_ || !kv || s.done == 0) return;
  if (!at_end) {
    bool anchor = s.next_cut < s.cuts.size() && s.cuts[s.next_cut] == s.done;
    if (anchor) ++s.next_cut;
    if (s.done > s.prompt_len)  // decoding: after an `after` id (</think>, </tool_call>, ...)
      anchor = std::find(anchors_.after.begin(), anchors_.after.end(), s.tokens[s.done - 1]) !=
               anchors_.after.end();
    if (!anchor) return;
  }
  prefix_->save(s.tokens, s.done, *kv, true);
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
  for (auto& s : running)
    if (static_cast<int64_t>(s->tokens.size()) - s->done == 1 && s->done >= s->prompt_len) {
      batch.push_back({s->seq, s->tokens.data() + s->done, 1, s->done, s->logits.data()});
      members.push_back(s.get());
      --budget;
      ++decode;
    }
  for (auto& s : running) {
    const int64_t left = static_cast<int64_t>(s->tokens.size()) - s->done;
    if (s->done >= s->prompt_len || budget <= 0) continue;
    int64_t n = std::min(left, budget);
    if (s->next_cut < s->cuts.size()) n = std::min(n, s->cuts[s->next_cut] - s->done);
    const bool last = n == left;
    batch.push_back({s->seq, s->tokens.data() + s->done, n, s->done,
                     last ? s->logits.data() : nullptr});
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
    if (!batch[b].logits) continue;  // mid-prompt chunk
    Request& r = *s.req;
    apply_penalties(r, s.tokens, s.counts, s.logits);
    if (r.processor)
      r.processor->process(s.logits, std::span<const int32_t>(s.tokens).subspan(s.prompt_len));
    const int32_t id = s.sampler.sample(s.logits.data(), static_cast<int64_t>(s.logits.size()));
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

}  // namespace ft
