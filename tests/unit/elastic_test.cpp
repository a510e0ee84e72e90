// Elastic memory (issue #9) on the CPU: resize-target validation, the pressure policy, the
// prefix page pool's shrink/compaction, and the engine applying resizes while requests run
// (greedy outputs unchanged, budgets and limits kept, nothing leaked), refusing a KV shrink that
// would cut a running request, surviving an injected out-of-memory step, and the watcher
// shrinking and growing on a fake free-memory probe.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "base/error.h"
#include "cache/prefix_cache.h"
#include "engine/elastic.h"
#include "engine/engine.h"
#include "model/model.h"

namespace ft {
namespace {

const char* k_demo = FT_SOURCE_DIR "/models/demo";
constexpr size_t MiB = size_t{1} << 20;

std::vector<PoolInfo> gpu_pools() {
  return {{.name = "moe", .unit = "slots", .size = 100, .used = 100, .min = 16, .max = 200,
           .bytes = 100 * MiB, .unit_bytes = MiB, .device = true},
          {.name = "kv", .unit = "tokens", .size = 4096, .used = 1000, .min = 1024, .max = 8192,
           .bytes = 4096 * 1024, .unit_bytes = 1024, .device = true},
          {.name = "prefix_kv", .unit = "tokens", .size = 1024, .used = 0, .min = 0, .max = 4096,
           .bytes = 1024 * 4096, .unit_bytes = 4096, .device = true}};
}

TEST(ElasticCheck, LimitsBudgetAndUnknownPools) {
  const auto pools = gpu_pools();
  EXPECT_NO_THROW(check_resize_target(pools, {.moe_slots = 50}, 0, 0));
  EXPECT_NO_THROW(check_resize_target(pools, {.moe_slots = 200, .kv_tokens = 1024}, 0, 0));
  auto msg = [&](const ResizeTarget& t, size_t budget, size_t used) -> std::string {
    try {
      check_resize_target(pools, t, budget, used);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(msg({.moe_slots = 8}, 0, 0).find("outside the 'moe' pool's limits [16, 200]"),
            std::string::npos);
  EXPECT_NE(msg({.kv_tokens = 9000}, 0, 0).find("[1024, 8192]"), std::string::npos);
  EXPECT_NE(msg({.state_slots = 3}, 0, 0).find("no 'state' pool"), std::string::npos);
  EXPECT_NE(msg({}, 0, 0).find("names no pool"), std::string::npos);
  // 100 more slots = 100 MiB: over a budget with 50 MiB left, fine when kv frees 4 MiB less.
  EXPECT_NE(msg({.moe_slots = 200}, 1000 * MiB, 950 * MiB).find("budget"), std::string::npos);
  EXPECT_EQ(msg({.moe_slots = 140}, 1000 * MiB, 950 * MiB), "");
  // A shrink of another pool pays for a grow.
  EXPECT_EQ(msg({.moe_slots = 101, .kv_tokens = 1024}, 1000 * MiB, 999 * MiB), "");
}

TEST(ElasticPolicy, ShrinksExpertsFirstThenPrefixNeverLiveKv) {
  const auto pools = gpu_pools();
  const size_t floor = 1000 * MiB, margin = 200 * MiB;
  const ElasticWant want{.moe_slots = 100, .prefix_tokens = 1024};
  // 40 MiB under the floor: 40 + 100 (half the margin) slots of 1 MiB, all from the experts.
  auto t = elastic_decide(floor - 40 * MiB, floor, margin, pools, want);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->moe_slots, 100 - 84);  // 140 asked, 84 above the minimum of 16
  EXPECT_EQ(t->kv_tokens, -1);
  // The rest of the deficit (56 MiB) comes from the prefix KV at 4 KiB a token.
  EXPECT_EQ(t->prefix_tokens, 1024 - 1024);  // 56 MiB > the whole 4 MiB pool
  // Inside the hysteresis band nothing moves; at the wanted sizes nothing grows.
  EXPECT_FALSE(elastic_decide(floor + 100 * MiB, floor, margin, pools, want));
  EXPECT_FALSE(elastic_decide(floor + 5000 * MiB, floor, margin, pools, want));
  // Shrunk pools grow back toward what was wanted, as far as the surplus allows.
  auto small = pools;
  small[0].size = 20;
  small[2].size = 0;
  t = elastic_decide(floor + margin + 30 * MiB, floor, margin, small, want);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->moe_slots, 50);
  EXPECT_EQ(t->prefix_tokens, -1);  // nothing left for it
  t = elastic_decide(floor + margin + 81 * MiB, floor, margin, small, want);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->moe_slots, 100);
  EXPECT_EQ(t->prefix_tokens, 256);  // the last MiB at 4 KiB a token
  // After a shrink by deficit + margin/2 the next reading sits inside the band: no flapping.
  const size_t after = floor + margin / 2;
  EXPECT_FALSE(elastic_decide(after, floor, margin, pools, want));
  // Pools outside the watched memory are left alone.
  auto host = pools;
  for (auto& p : host) p.device = false;
  EXPECT_FALSE(elastic_decide(0, floor, margin, host, want));
  // Everything at its minimum: nothing to give.
  auto floor_pools = pools;
  floor_pools[0].size = 16;
  floor_pools[2].size = 0;
  EXPECT_FALSE(elastic_decide(0, floor, margin, floor_pools, want));
}

TEST(ElasticPrefixPool, ShrinkEvictsCompactsAndKeepsEntries) {
  auto model = Model::load(k_demo);
  const ModelConfig& c = model->config();
  PrefixCache pc(c, {.page_tokens = 4, .kv_pages = 32, .snapshot_bytes = 1 << 20});
  std::vector<std::vector<int32_t>> seqs;
  for (int s = 0; s < 6; ++s) {  // 6 prompts of 16 tokens = 4 pages each, distinct
    std::vector<int32_t> t;
    for (int i = 0; i < 16; ++i) t.push_back(5 + s * 40 + i);
    KVCache kv(c, 64);
    for (int64_t l = 0; l < c.n_layers; ++l)
      for (int64_t p = 0; p < 16; ++p)
        for (int64_t d = 0; d < kv.kv_dim; ++d) {
          kv.k_at(l, p)[d] = static_cast<float>(s * 1000 + p * 10 + d);
          kv.v_at(l, p)[d] = -static_cast<float>(s * 1000 + p * 10 + d);
        }
    kv.recurrent_len = 16;
    pc.save(t, 16, kv, false);
    seqs.push_back(t);
  }
  EXPECT_EQ(pc.stats().pages_used, 24);
  pc.check_invariants();
  pc.resize(10, -1);  // LRU eviction down to 2 prompts, then compaction into 10 pages
  EXPECT_EQ(pc.stats().pages_total, 10);
  EXPECT_LE(pc.stats().pages_used, 10);
  pc.check_invariants();
  // The newest prompts survive, with their data, at new page ids.
  for (int s = 4; s < 6; ++s) {
    std::vector<int32_t> prompt = seqs[s];
    prompt.push_back(3);
    KVCache kv(c, 64);
    EXPECT_EQ(pc.restore(prompt, kv), 16) << "prompt " << s;
    EXPECT_EQ(kv.k_at(1, 13)[2], static_cast<float>(s * 1000 + 130 + 2));
    EXPECT_EQ(kv.v_at(0, 5)[0], -static_cast<float>(s * 1000 + 50));
  }
  pc.resize(64, 4096);  // grow: entries kept
  EXPECT_EQ(pc.stats().pages_total, 64);
  EXPECT_EQ(pc.stats().snapshot_budget, 4096u);
  pc.check_invariants();
  std::vector<int32_t> prompt = seqs[5];
  prompt.push_back(3);
  KVCache kv(c, 64);
  EXPECT_EQ(pc.restore(prompt, kv), 16);
  pc.resize(0, 0);  // everything dropped, nothing leaked
  EXPECT_EQ(pc.stats().pages_used, 0);
  pc.check_invariants();
}

// ---- the engine (CPU runner, demo model)

struct Answer {
  std::vector<int32_t> ids;
  FinishReason finish = FinishReason::NONE;
  std::string error;
};

std::shared_ptr<Request> start(Engine& e, const std::vector<int32_t>& prompt, int64_t n) {
  auto r = std::make_shared<Request>();
  r->prompt = prompt;
  r->max_tokens = n;
  r->ignore_eos = true;
  e.submit(r);
  return r;
}

Answer finish(Request& r) {
  Answer a;
  for (Event ev; r.events.pop(ev, 60000);) {
    a.ids.insert(a.ids.end(), ev.ids.begin(), ev.ids.end());
    if (ev.kind == Event::Kind::DONE) {
      a.finish = ev.finish;
      a.error = ev.error;
      break;
    }
  }
  return a;
}

std::vector<int32_t> prompt_of(int k) {
  std::vector<int32_t> p;
  for (int i = 0; i < 20 + 7 * k; ++i) p.push_back(10 + (k * 37 + i * 11) % 500);
  return p;
}

EngineOptions options() {
  EngineOptions o{.max_running = 4, .ctx_size = 256, .chunk = 32, .threads = 2,
                  .stats_log_s = 0};
  o.prefix_cache_tokens = 512;
  o.elastic.on = false;
  return o;
}

std::unique_ptr<Engine> engine(EngineOptions o, std::unique_ptr<Runner> runner = nullptr) {
  auto model = Model::load(k_demo);
  if (!runner) runner = make_cpu_runner(*model, o.threads, o.chunk, o.max_running, o.ctx_size);
  return std::make_unique<Engine>(std::move(model),
                                  std::make_unique<Tokenizer>(Tokenizer::load(k_demo)), o,
                                  std::move(runner));
}

void check_pools(const std::vector<PoolInfo>& pools) {
  for (const PoolInfo& p : pools) {
    EXPECT_LE(p.used, p.size) << p.name;
    EXPECT_GE(p.size, p.min) << p.name;
    EXPECT_LE(p.size, p.max) << p.name;
  }
}

TEST(ElasticEngine, ResizesWhileRequestsRunLeaveGreedyOutputsUnchanged) {
  std::vector<std::vector<int32_t>> base;
  {
    auto e = engine(options());
    std::vector<std::shared_ptr<Request>> rs;
    for (int k = 0; k < 6; ++k) rs.push_back(start(*e, prompt_of(k), 48));
    for (auto& r : rs) base.push_back(finish(*r).ids);
  }
  auto e = engine(options());
  const auto pools = e->pools();
  ASSERT_TRUE(find_pool(pools, "kv") && find_pool(pools, "prefix_kv") && find_pool(pools, "state"));
  EXPECT_FALSE(find_pool(pools, "moe"));  // the CPU keeps every expert in RAM
  std::vector<std::shared_ptr<Request>> rs;
  for (int k = 0; k < 6; ++k) rs.push_back(start(*e, prompt_of(k), 48));
  // Resize every few milliseconds while they run: prefix pages (evict + compact), snapshots,
  // and the KV capacity (above what the running requests need).
  std::atomic<bool> done{false};
  int applied = 0;
  std::thread resizer([&] {
    const int64_t sizes[] = {0, 64, 512, 16, 1024};
    for (int i = 0; !done.load(); ++i) {
      ResizeTarget t{.prefix_tokens = sizes[i % 5], .state_slots = (i % 3) * 4};
      if (i % 4 == 1) t.kv_tokens = (i % 8 == 1 ? 1024 : 2048);  // 256 or 512 per slot
      const int64_t id = e->submit_resize(t);
      const ResizeResult r = e->resize_result(id, 10);
      EXPECT_TRUE(r.done);
      EXPECT_TRUE(r.ok) << r.error;
      applied += r.ok;
      check_pools(e->pools());
      std::this_thread::sleep_for(std::chrono::milliseconds(3));
    }
  });
  for (size_t k = 0; k < rs.size(); ++k) {
    const Answer a = finish(*rs[k]);
    EXPECT_EQ(a.finish, FinishReason::LENGTH) << a.error;
    EXPECT_EQ(a.ids, base[k]) << "request " << k;
  }
  done = true;
  resizer.join();
  EXPECT_GT(applied, 3);
  const EngineStats s = e->stats();
  EXPECT_EQ(s.elastic.resizes, applied);
  EXPECT_EQ(s.elastic.resize_failures, 0);
  EXPECT_GT(s.elastic.resize_p99_s, 0);
  EXPECT_GE(s.elastic.resize_p99_s, s.elastic.resize_p50_s);
  // The pools follow the last resize; the prefix cache still works after all of it.
  EXPECT_EQ(e->submit_resize({.prefix_tokens = 512}), s.elastic.resizes + 1);
  EXPECT_TRUE(e->resize_result(s.elastic.resizes + 1, 10).ok);
  EXPECT_EQ(find_pool(e->pools(), "prefix_kv")->size, 512);
  EXPECT_EQ(finish(*start(*e, prompt_of(2), 48)).ids, base[2]);
}

TEST(ElasticEngine, RefusesBadTargetsAndNeverCutsRunningKv) {
  auto e = engine(options());
  auto code = [&](const ResizeTarget& t) {
    try {
      e->submit_resize(t);
    } catch (const RequestError& r) {
      return r.status;
    }
    return 0;
  };
  EXPECT_EQ(code({.moe_slots = 10}), 400);      // no expert cache on the CPU
  EXPECT_EQ(code({.kv_tokens = 8}), 400);       // below the pool's minimum
  EXPECT_EQ(code({.prefix_tokens = 1 << 30}), 400);
  EXPECT_EQ(code({}), 400);
  // A running request needs 20 + 200 tokens: a KV of 128 per slot would cut it.
  auto r = start(*e, prompt_of(0), 200);
  while (e->stats().generated_tokens_total < 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  int status = 0;
  try {
    const ResizeResult res = e->resize_result(e->submit_resize({.kv_tokens = 4 * 128}), 10);
    EXPECT_TRUE(res.done);
    EXPECT_FALSE(res.ok);
  } catch (const RequestError& err) {
    status = err.status;  // refused at once: the pool's minimum covers the running request
  }
  const Answer a = finish(*r);
  EXPECT_EQ(a.finish, FinishReason::LENGTH) << a.error;
  EXPECT_EQ(a.ids.size(), 200u);
  EXPECT_TRUE(status == 0 || status == 400);
  // Idle, the same shrink is fine; then a request that no longer fits is refused up front.
  while (e->stats().running > 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const ResizeResult ok = e->resize_result(e->submit_resize({.kv_tokens = 4 * 128}), 10);
  EXPECT_TRUE(ok.ok) << ok.error;
  EXPECT_EQ(e->ctx_size(), 128);
  EXPECT_THROW(start(*e, prompt_of(0), 200), RequestError);
  EXPECT_EQ(finish(*start(*e, prompt_of(0), 60)).finish, FinishReason::LENGTH);
}

// The CPU runner with out-of-memory failures injected at chosen forward passes, and a stand-in
// "moe" pool (64 slots of 1 MiB) the engine may shrink.
class FailingRunner : public Runner {
 public:
  FailingRunner(std::unique_ptr<Runner> inner, std::vector<int> fail_at)
      : inner_(std::move(inner)), fail_at_(std::move(fail_at)) {}
  int max_seqs() const override { return inner_->max_seqs(); }
  int64_t capacity() const override { return inner_->capacity(); }
  int64_t max_chunk() const override { return inner_->max_chunk(); }
  void open(int seq) override { inner_->open(seq); }
  void close(int seq) override { inner_->close(seq); }
  void forward_batch(std::span<const RunnerStep> steps) override {
    const int call = calls_++;
    if (std::find(fail_at_.begin(), fail_at_.end(), call) != fail_at_.end())
      throw OutOfMemory("injected: cannot allocate 64.0 MiB of GPU memory");
    inner_->forward_batch(steps);
  }
  RunnerStats stats() const override { return inner_->stats(); }
  size_t weight_bytes() const override { return inner_->weight_bytes(); }
  size_t kv_bytes() const override { return inner_->kv_bytes(); }
  std::vector<PoolInfo> pools() const override {
    std::vector<PoolInfo> p = inner_->pools();
    p.push_back({.name = "moe", .unit = "slots", .size = moe_, .used = moe_, .min = 8,
                 .max = 64, .bytes = static_cast<size_t>(moe_) * MiB, .unit_bytes = MiB,
                 .device = true});
    return p;
  }
  void resize(const ResizeTarget& t) override {
    if (t.moe_slots >= 0) moe_ = t.moe_slots;
    ResizeTarget rest = t;
    rest.moe_slots = -1;
    inner_->resize(rest);
  }

 private:
  std::unique_ptr<Runner> inner_;
  std::vector<int> fail_at_;
  int calls_ = 0;
  int64_t moe_ = 64;
};

TEST(ElasticEngine, OutOfMemoryStepShrinksAndTheEngineGoesOn) {
  std::vector<int32_t> want;
  {
    auto e = engine(options());
    want = finish(*start(*e, prompt_of(1), 24)).ids;
  }
  const EngineOptions o = options();
  auto model = Model::load(k_demo);
  // Pass 5 fails once (retried after the shrink: same answer); passes 40 and 41 fail back to
  // back (that request fails with a clear error; the next one is served).
  auto runner = std::make_unique<FailingRunner>(
      make_cpu_runner(*model, o.threads, o.chunk, o.max_running, o.ctx_size),
      std::vector<int>{5, 40, 41});
  Engine e(std::move(model), std::make_unique<Tokenizer>(Tokenizer::load(k_demo)), o,
           std::move(runner));
  ASSERT_EQ(find_pool(e.pools(), "moe")->size, 64);
  const Answer a = finish(*start(e, prompt_of(1), 24));
  EXPECT_EQ(a.finish, FinishReason::LENGTH) << a.error;
  EXPECT_EQ(a.ids, want);
  EXPECT_EQ(e.stats().elastic.oom_events, 1);
  EXPECT_EQ(e.stats().elastic.shrinks, 1);
  EXPECT_EQ(find_pool(e.pools(), "moe")->size, 32);  // the expert cache halves
  const Answer b = finish(*start(e, prompt_of(3), 40));
  EXPECT_EQ(b.finish, FinishReason::ERROR);
  EXPECT_NE(b.error.find("out of memory"), std::string::npos) << b.error;
  EXPECT_EQ(e.stats().elastic.oom_events, 2);
  EXPECT_EQ(find_pool(e.pools(), "moe")->size, 16);
  const Answer c = finish(*start(e, prompt_of(1), 24));
  EXPECT_EQ(c.finish, FinishReason::LENGTH) << c.error;
  EXPECT_EQ(c.ids, want);
}

TEST(ElasticEngine, WatcherShrinksUnderPressureAndGrowsBack) {
  std::atomic<size_t> free_b{size_t{8} << 30};
  EngineOptions o = options();
  o.prefix_cache_tokens = 4096;
  o.elastic = {.on = true, .floor_bytes = size_t{1} << 30, .grow_margin_bytes = 64 * MiB,
               .interval_ms = 10, .grow_cooldown_s = 0.05};
  o.memory_probe = [&](size_t* f, size_t* t) {
    *f = free_b.load();
    *t = size_t{16} << 30;
    return true;
  };
  auto e = engine(o);
  EXPECT_TRUE(e->stats().elastic.watching);
  const PoolInfo p0 = *find_pool(e->pools(), "prefix_kv");
  ASSERT_GT(p0.size, 0);
  auto r = start(*e, prompt_of(4), 120);
  // Another process takes memory: free falls 2 pages' worth under the floor.
  free_b = (size_t{1} << 30) - 2 * 16 * p0.unit_bytes;
  auto wait_for = [&](auto pred) {
    for (int i = 0; i < 2000 && !pred(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return pred();
  };
  EXPECT_TRUE(wait_for([&] { return e->stats().elastic.shrinks >= 1; }));
  const int64_t shrunk = find_pool(e->pools(), "prefix_kv")->size;
  EXPECT_LT(shrunk, p0.size);
  EXPECT_TRUE(find_pool(e->pools(), "kv")->size == find_pool(e->pools(), "kv")->size);
  // Our own shrink would show up as free memory: simulate it, then the memory comes back.
  free_b = size_t{8} << 30;
  EXPECT_TRUE(wait_for([&] { return e->stats().elastic.grows >= 1; }));
  EXPECT_TRUE(wait_for([&] { return find_pool(e->pools(), "prefix_kv")->size == p0.size; }));
  const Answer a = finish(*r);
  EXPECT_EQ(a.finish, FinishReason::LENGTH) << a.error;
  EXPECT_EQ(a.ids.size(), 120u);
  const EngineStats s = e->stats();
  EXPECT_EQ(s.elastic.free_bytes, size_t{8} << 30);
  EXPECT_EQ(s.elastic.floor_bytes, size_t{1} << 30);
  EXPECT_EQ(s.elastic.resize_failures, 0);
}

}  // namespace
}  // namespace ft
