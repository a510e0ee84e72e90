// The engine's backend seam and start-up pieces: a counting runner proves slots are opened and
// closed in pairs and capped by the runner; batched answers equal one-at-a-time answers; the
// CPU backend's stats; the GPU sequence layout from the KV reserve; flag validation; the
// progress bar.
#include <gtest/gtest.h>

#include <chrono>
#include <set>
#include <thread>

#include "base/error.h"
#include "engine/backend.h"
#include "engine/engine.h"
#include "engine/progress.h"
#include "model/model.h"

namespace ft {
namespace {

const char* k_demo = FT_SOURCE_DIR "/models/demo";

// Slot bookkeeping, owned by the test (it outlives the engine that owns the runner).
struct Counts {
  std::set<int> open;
  int max_open = 0, opens = 0;
  int logit_steps = 0, argmax_steps = 0;  // steps asking for logits / for the argmax id only
};

// Wraps the CPU runner with slot bookkeeping checks.
class CountingRunner : public Runner {
 public:
  CountingRunner(const Model& m, int seqs, Counts& c)
      : inner_(make_cpu_runner(m, 2, 256, seqs, 512)), c_(c) {}
  int max_seqs() const override { return inner_->max_seqs(); }
  int64_t capacity() const override { return inner_->capacity(); }
  int64_t max_chunk() const override { return inner_->max_chunk(); }
  void open(int seq) override {
    EXPECT_TRUE(c_.open.insert(seq).second) << "slot " << seq << " opened twice";
    c_.max_open = std::max(c_.max_open, static_cast<int>(c_.open.size()));
    ++c_.opens;
    inner_->open(seq);
  }
  void close(int seq) override {
    EXPECT_EQ(c_.open.erase(seq), 1u) << "slot " << seq << " closed but not open";
    inner_->close(seq);
  }
  void forward_batch(std::span<const RunnerStep> steps) override {
    std::set<int> seen;
    for (const auto& s : steps) {
      EXPECT_TRUE(c_.open.count(s.seq)) << "step on a closed slot";
      EXPECT_TRUE(seen.insert(s.seq).second) << "slot twice in one step";
      if (s.logits) ++c_.logit_steps;
      if (s.argmax && !s.logits) ++c_.argmax_steps;
    }
    inner_->forward_batch(steps);
  }
  RunnerStats stats() const override { return inner_->stats(); }
  size_t weight_bytes() const override { return inner_->weight_bytes(); }
  size_t kv_bytes() const override { return inner_->kv_bytes(); }

 private:
  std::unique_ptr<Runner> inner_;
  Counts& c_;  // touched by the engine thread only; read after it stopped or after a request's
               // last event (the event queue orders the step before it)
};

std::vector<int32_t> answer(Engine& e, const std::string& text, int64_t n,
                            int top_logprobs = -1) {
  auto r = std::make_shared<Request>();
  r->prompt = e.tokenizer().encode(text, true);
  r->max_tokens = n;
  r->ignore_eos = true;
  r->top_logprobs = top_logprobs;
  e.submit(r);
  std::vector<int32_t> ids;
  for (Event ev; r->events.pop(ev, 60000);) {
    ids.insert(ids.end(), ev.ids.begin(), ev.ids.end());
    if (ev.kind == Event::Kind::DONE) break;
  }
  return ids;
}

TEST(EngineRunner, SlotsPairUpAndBatchedAnswersMatchSingleOnes) {
  const std::vector<std::string> prompts{"The cat", "Once upon a time", "hello", "A river"};
  std::vector<std::vector<int32_t>> alone, together(prompts.size());
  {
    Engine e(Model::load(k_demo), std::make_unique<Tokenizer>(Tokenizer::load(k_demo)),
             {.max_running = 1, .ctx_size = 512, .threads = 2});
    for (const auto& p : prompts) alone.push_back(answer(e, p, 12));
    const EngineStats s = e.stats();
    EXPECT_EQ(s.runner.backend, "cpu");
    EXPECT_GT(s.runner.steps, 0);
    EXPECT_EQ(s.runner.hits + s.runner.misses + s.runner.cpu_experts, 0);
    EXPECT_EQ(s.runner.fetched_bytes, 0u);
    EXPECT_EQ(s.runner.kv_tokens, 512);
  }
  auto model = Model::load(k_demo);
  Counts counts;
  auto runner = std::make_unique<CountingRunner>(*model, 3, counts);
  {
    // Asks for 8 running but the runner has 3 slots: the engine caps itself.
    Engine e(std::move(model), std::make_unique<Tokenizer>(Tokenizer::load(k_demo)),
             {.max_running = 8, .ctx_size = 512, .threads = 2}, std::move(runner));
    EXPECT_EQ(e.options().max_running, 3);
    std::vector<std::thread> th;
    for (size_t i = 0; i < prompts.size(); ++i)
      th.emplace_back([&, i] { together[i] = answer(e, prompts[i], 12); });
    for (auto& t : th) t.join();
    for (int i = 0; i < 100 && e.stats().kv_bytes != 0; ++i)  // updated after the last step
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_EQ(e.stats().kv_bytes, 0u);  // every slot closed again
  }
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(alone[i], together[i]) << prompts[i];
  EXPECT_EQ(counts.opens, 4);
  EXPECT_LE(counts.max_open, 3);
  EXPECT_TRUE(counts.open.empty());
}

// A greedy request with nothing that reads the logits asks the runner for the argmax id only
// (the CUDA runner then leaves the logits on the device); logprobs bring the logits back, and
// both give the same tokens.
TEST(EngineRunner, PlainGreedyStepsAskForTheArgmaxOnly) {
  auto model = Model::load(k_demo);
  Counts counts;
  auto runner = std::make_unique<CountingRunner>(*model, 1, counts);
  Engine e(std::move(model), std::make_unique<Tokenizer>(Tokenizer::load(k_demo)),
           {.max_running = 1, .ctx_size = 512, .threads = 2}, std::move(runner));
  const std::vector<int32_t> plain = answer(e, "Once upon a time", 10);
  EXPECT_EQ(counts.argmax_steps, 10);
  EXPECT_EQ(counts.logit_steps, 0);
  const std::vector<int32_t> with_logprobs = answer(e, "Once upon a time", 10, 0);
  EXPECT_EQ(counts.logit_steps, 10);
  EXPECT_EQ(counts.argmax_steps, 10);
  EXPECT_EQ(plain, with_logprobs);
}

TEST(EngineRunner, CancelledAndFinishedRequestsGiveTheirSlotBack) {
  auto model = Model::load(k_demo);
  Counts counts;
  auto runner = std::make_unique<CountingRunner>(*model, 1, counts);
  {
    Engine e(std::move(model), std::make_unique<Tokenizer>(Tokenizer::load(k_demo)),
             {.max_running = 1, .ctx_size = 512, .threads = 2}, std::move(runner));
    auto r = std::make_shared<Request>();
    r->prompt = e.tokenizer().encode("The cat", true);
    r->max_tokens = 400;
    r->ignore_eos = true;
    e.submit(r);
    Event ev;
    ASSERT_TRUE(r->events.pop(ev, 60000));
    r->cancelled = true;
    while (ev.kind != Event::Kind::DONE) ASSERT_TRUE(r->events.pop(ev, 60000));
    EXPECT_EQ(ev.finish, FinishReason::CANCELLED);
    EXPECT_EQ(answer(e, "hello", 5).size(), 5u);  // the one slot is free again
  }
  EXPECT_EQ(counts.opens, 2);
  EXPECT_TRUE(counts.open.empty());
}

TEST(GpuSeqLayout, ReserveHoldsTheContextTimesTheSequences) {
  EngineOptions o{.max_running = 4, .ctx_size = 4096};
  BackendOptions b;
  auto l = gpu_seq_layout(o, b);  // no --ctx-size: one agent-sized sequence
  EXPECT_EQ(l.ctx, 32768);
  EXPECT_EQ(l.seqs, 1);
  b.ctx_size_given = true;
  l = gpu_seq_layout(o, b);
  EXPECT_EQ(l.ctx, 4096);
  EXPECT_EQ(l.seqs, 4);  // 8 would fit; capped by max_running
  b.kv_reserve_tokens = 10000;
  EXPECT_EQ(gpu_seq_layout(o, b).seqs, 2);
  o.ctx_size = 65536;
  try {
    gpu_seq_layout(o, b);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("raise --kv-reserve-tokens to at least 65536"),
              std::string::npos)
        << e.what();
  }
}

TEST(BackendOptions, ValidationNamesTheFlag) {
  auto msg = [](BackendOptions b) {
    try {
      validate_backend_options(b);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(msg({}), "");
  EXPECT_NE(msg({.moe_backend = "gpu"}).find("--moe-backend"), std::string::npos);
  EXPECT_NE(msg({.gpu_memory = "0"}).find("--gpu-memory"), std::string::npos);
  EXPECT_NE(msg({.gpu_memory = "8 parsecs"}).find("unknown unit"), std::string::npos);
  EXPECT_NE(msg({.memory_ratio = 0}).find("--memory-ratio"), std::string::npos);
  EXPECT_NE(msg({.moe_cache_size = 10, .moe_cache_rate = 0.5}).find("not both"),
            std::string::npos);
}

TEST(Progress, LineAndNonTerminalDeciles) {
  EXPECT_EQ(progress_line("experts", 500'000'000, 1'000'000'000, 2.0, 10),
            "experts [#####.....]  50%  0.50/1.00 GB  0.2 GB/s");
  EXPECT_EQ(progress_line("x", 7, 0, 0, 4), "x [####] 100%  0.00/0.00 GB  0.0 GB/s");
  testing::internal::CaptureStderr();
  {
    ProgressBar bar("copy", 1000, 0);
    for (size_t d = 0; d <= 1000; d += 10) bar.update(d);
  }
  const std::string out = testing::internal::GetCapturedStderr();
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 11) << out;  // 0%, 10%, ..., 100%
  EXPECT_EQ(out.find('\r'), std::string::npos);
}

TEST(SnapshotVram, SlotsFromTheBudget) {
  const size_t mib = size_t{1} << 20, gib = size_t{1} << 30, snap = 66 * mib;
  const size_t auto_ = BackendOptions::k_snapshot_vram_auto;
  EXPECT_EQ(snapshot_vram_slots(auto_, snap, 16 * gib), 31);  // 2 GiB / 66 MiB
  EXPECT_EQ(snapshot_vram_slots(auto_, 1 * mib, 16 * gib), 64);  // at most 64
  EXPECT_EQ(snapshot_vram_slots(auto_, 0, 16 * gib), 0);  // no recurrent state: no tier
  EXPECT_EQ(snapshot_vram_slots(0, snap, 16 * gib), 0);
  EXPECT_EQ(snapshot_vram_slots(gib, snap, 16 * gib), 15);
  EXPECT_EQ(snapshot_vram_slots(8 * gib, snap, 16 * gib), 124);  // half the budget is allowed
  auto msg = [&](size_t requested) {
    try {
      snapshot_vram_slots(requested, snap, 16 * gib);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(msg(9 * gib).find("--snapshot-vram 9.00 GiB is more than half"), std::string::npos)
      << msg(9 * gib);
  EXPECT_NE(msg(10 * mib).find("holds no recurrent-state snapshot (66.0 MiB each)"),
            std::string::npos)
      << msg(10 * mib);
}

}  // namespace
}  // namespace ft
