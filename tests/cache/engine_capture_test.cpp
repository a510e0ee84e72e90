// The engine's in-pass state captures (Runner::capture_slots) on the CPU: a runner that takes
// a step's marks by running the step in pieces and keeping the state after each piece stands in
// for the CUDA runner's single-pass captures. Replaying the small agent trace through it must
// give exactly the recomputed tokens and greedy first tokens of the plain CPU runner (the same
// snapshots are saved, now from inside longer chunks) in fewer engine steps.
#include <gtest/gtest.h>

#include <fstream>

#include "cli/bench_agent.h"
#include "engine/backend.h"
#include "model/model.h"

namespace ft::cli {
namespace {

const std::string k_root = FT_SOURCE_DIR;

// Forwards everything to a CPU runner; steps with marks run piece by piece up to each mark.
class PieceRunner : public Runner {
 public:
  PieceRunner(std::unique_ptr<Runner> in, int32_t slots) : in_(std::move(in)), slots_(slots) {}
  int max_seqs() const override { return in_->max_seqs(); }
  int64_t capacity() const override { return in_->capacity(); }
  int64_t max_chunk() const override { return in_->max_chunk(); }
  void open(int seq) override { in_->open(seq); }
  void close(int seq) override { in_->close(seq); }
  RunnerStats stats() const override { return in_->stats(); }
  size_t weight_bytes() const override { return in_->weight_bytes(); }
  size_t kv_bytes() const override { return in_->kv_bytes(); }
  bool prefix_io() const override { return in_->prefix_io(); }
  void export_kv(int seq, int64_t pos0, int64_t n, float* k, float* v) override {
    in_->export_kv(seq, pos0, n, k, v);
  }
  void import_kv(int seq, int64_t pos0, int64_t n, const float* k, const float* v) override {
    in_->import_kv(seq, pos0, n, k, v);
  }
  int64_t state_floats() const override { return in_->state_floats(); }
  void export_state(int seq, float* dst) override { in_->export_state(seq, dst); }
  void import_state(int seq, const float* src, int64_t len) override {
    in_->import_state(seq, src, len);
  }
  int32_t capture_slots() const override { return slots_; }
  void capture_export(int32_t c, float* dst) override {
    ASSERT_LT(c, static_cast<int32_t>(caps_.size()));
    std::copy(caps_[c].begin(), caps_[c].end(), dst);
  }
  void forward_batch(std::span<const RunnerStep> steps) override {
    caps_.clear();
    std::vector<RunnerStep> rest;
    int32_t marks = 0;
    for (const RunnerStep& s : steps) {
      marks += s.n_marks;
      int64_t at = s.pos0;
      for (int32_t i = 0; i < s.n_marks; ++i) {
        ASSERT_GT(s.marks[i], at);
        ASSERT_LT(s.marks[i], s.pos0 + s.n);
        const RunnerStep piece{s.seq, s.ids + (at - s.pos0), s.marks[i] - at, at, nullptr};
        in_->forward_batch({&piece, 1});
        caps_.emplace_back(in_->state_floats());
        in_->export_state(s.seq, caps_.back().data());
        at = s.marks[i];
      }
      rest.push_back({s.seq, s.ids + (at - s.pos0), s.pos0 + s.n - at, at, s.logits, nullptr, 0,
                      s.argmax});
    }
    ASSERT_LE(marks, slots_);
    max_marks = std::max(max_marks, marks);
    in_->forward_batch(rest);
  }
  int32_t max_marks = 0;

 private:
  std::unique_ptr<Runner> in_;
  int32_t slots_;
  std::vector<std::vector<float>> caps_;
};

TEST(EngineCapture, AnchorsInsideAChunkSaveTheSameSnapshots) {
  auto tok = agent_tokenizer(k_root + "/models/demo");
  const ChatTemplate tpl = ChatTemplate::load(k_root + "/bench/traces/qwen3_agent.jinja");
  std::ifstream f(k_root + "/tests/cache/agent_session_small.json");
  const auto prompts = render_agent_trace(nlohmann::ordered_json::parse(f), tpl, tok);
  const ModelConfig c = agent_model_config("tiny", static_cast<int64_t>(tok.vocab_size()));
  EngineOptions eo{.max_running = 1, .ctx_size = 16384, .chunk = 512, .threads = 2,
                   .stats_log_s = 0};
  eo.anchor_every = 256;
  AgentRun runs[2];
  int32_t max_marks = 0;
  for (int captures : {0, 3}) {
    auto model = Model::synthetic(c, 7);
    std::unique_ptr<Runner> cpu = make_cpu_runner(*model, 2, eo.chunk, 1, eo.ctx_size);
    auto runner = std::make_unique<PieceRunner>(std::move(cpu), captures);
    PieceRunner* pr = runner.get();
    Engine e(std::move(model),
             std::make_unique<Tokenizer>(agent_tokenizer(k_root + "/models/demo")), eo,
             std::move(runner));
    e.reset_prefix_cache(true);
    runs[captures > 0] = replay_agent(e, prompts, "anchors");
    if (captures) max_marks = pr->max_marks;
  }
  EXPECT_EQ(max_marks, 3);  // chunks held up to the capture slots' anchors
  int64_t passes[2] = {0, 0};
  for (size_t i = 0; i < prompts.size(); ++i) {
    const AgentTurn &plain = runs[0].turns.at(i), &cap = runs[1].turns.at(i);
    EXPECT_EQ(cap.recomputed, plain.recomputed) << "turn " << i;
    EXPECT_EQ(cap.first_id, plain.first_id) << "turn " << i;
    EXPECT_LE(cap.passes, plain.passes) << "turn " << i;
    passes[0] += plain.passes, passes[1] += cap.passes;
  }
  EXPECT_LT(passes[1], passes[0]);
  EXPECT_LE(runs[1].max_ratio, 1.1);
}

}  // namespace
}  // namespace ft::cli
