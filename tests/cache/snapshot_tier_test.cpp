// The snapshot pool's device tier: slots handed out, the least recently used device snapshot
// spilled to the host tier when all are taken, slots returned on eviction and clear; and the
// prefix cache on the hybrid fixture with two "device" slots (host vectors standing in for
// VRAM) restoring the same prefixes with the same logits as the host-only cache.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "cache/prefix_cache.h"
#include "cache/state_snapshots.h"
#include "engine/anchors.h"

namespace ft {
namespace {

TEST(SnapshotTier, SlotsSpillLruToTheHostTier) {
  SnapshotPool pool(1 << 20, 2);
  std::vector<int32_t> spilled;
  auto spill = [&](int32_t slot, std::vector<float>& out) {
    spilled.push_back(slot);
    out.assign(3, float(slot) + 0.5f);
  };
  const std::vector<uint64_t> h = {0, 10, 20, 30, 40};
  const int32_t a = pool.take_slot(spill), b = pool.take_slot(spill);
  EXPECT_NE(a, b);
  EXPECT_TRUE(pool.put(1, 10, std::vector<float>{1.f}, a));
  EXPECT_TRUE(pool.put(2, 20, std::vector<float>{2.f}, b));
  EXPECT_EQ(pool.stats().device, 2);
  pool.touch(1, 10);  // snapshot 2 is now the least recently used device one
  const int32_t c = pool.take_slot(spill);
  EXPECT_EQ(c, b);
  ASSERT_EQ(spilled, std::vector<int32_t>{b});
  EXPECT_TRUE(pool.put(3, 30, std::vector<float>{3.f}, c));
  const auto* s2 = pool.deepest(h, 2, [](int64_t) { return true; });
  ASSERT_TRUE(s2);
  EXPECT_EQ(s2->slot, -1);  // on the host now: state in front of its data
  EXPECT_EQ(s2->data, (std::vector<float>{b + 0.5f, b + 0.5f, b + 0.5f, 2.f}));
  EXPECT_EQ(pool.stats().spilled, 1);
  EXPECT_EQ(pool.stats().bytes, 6 * sizeof(float));
  pool.clear();  // every slot comes back
  EXPECT_EQ(pool.stats().device, 0);
  EXPECT_GE(pool.take_slot(spill), 0);
  EXPECT_GE(pool.take_slot(spill), 0);
  pool.set_budget(0);
}

// KvCacheIO plus `slots` host vectors standing in for the runner's device slots.
class SlotIO : public KvCacheIO {
 public:
  SlotIO(const ModelConfig& c, KVCache& kv, std::vector<std::vector<float>>& slots)
      : KvCacheIO(c, kv), slots_(slots) {}
  void state_to_slot(int32_t slot) override {
    slots_.at(slot).resize(state_floats());
    read_state(slots_[slot].data());
  }
  void slot_to_state(int32_t slot, int64_t len) override { write_state(slots_.at(slot).data(), len); }
  void read_slot(int32_t slot, float* dst) override {
    std::copy(slots_.at(slot).begin(), slots_.at(slot).end(), dst);
  }

 private:
  std::vector<std::vector<float>>& slots_;
};

TEST(SnapshotTier, HybridPrefixCacheWithTwoDeviceSlotsMatchesHostOnly) {
  auto model = Model::load(std::string(FT_FIXTURES) + "/qwen3_next");
  const ModelConfig& c = model->config();
  ThreadPool pool(2, false);
  Transformer tf(*model, pool, 64);
  const AnchorTokens anchors{.after = {2, 4}, .before = {1, 3}};
  const PrefixCacheOptions host{.page_tokens = 16, .kv_pages = 512, .snapshot_bytes = 64 << 20};
  PrefixCacheOptions tiered = host;
  tiered.device_snapshots = 2;
  PrefixCache ref(c, host), dev(c, tiered);
  std::vector<std::vector<float>> slots(2);
  std::mt19937 rng(5);
  std::vector<int32_t> convo = {1, 11, 10};
  // One request: restore, prefill to each anchor saving there, logits of the last token.
  auto run = [&](PrefixCache& cache, const std::vector<int32_t>& p, int64_t* cached) {
    KVCache kv(c, 1024);
    SlotIO io(c, kv, slots);
    std::vector<float> logits(c.vocab_size);
    int64_t pos = *cached = cache.restore(p, io);
    for (int64_t cut : find_anchors(p, anchors, 0, pos)) {
      tf.forward(p.data() + pos, cut - pos, pos, kv, logits.data(), false);
      pos = cut;
      cache.save(p, cut, io, true);
    }
    return logits;
  };
  for (int turn = 0; turn < 6; ++turn) {
    for (int i = 0; i < 20 + turn * 3; ++i) convo.push_back(20 + rng() % 900);
    convo.insert(convo.end(), {2, 3});  // <|im_end|>, <tool_call>: anchors after / before
    for (int i = 0; i < 7; ++i) convo.push_back(20 + rng() % 900);
    convo.insert(convo.end(), {4, 1, 12, 10});
    std::vector<int32_t> prompt = convo;
    if (turn % 2 == 1) prompt[prompt.size() - 12] = 500;  // an edit inside the last call
    int64_t n_ref = 0, n_dev = 0;
    const std::vector<float> want = run(ref, prompt, &n_ref);
    const std::vector<float> got = run(dev, prompt, &n_dev);
    EXPECT_EQ(n_dev, n_ref) << "turn " << turn;
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 1e-4f * (1 + std::fabs(want[i]))) << "turn " << turn;
    dev.check_invariants();
  }
  const PrefixCacheStats s = dev.stats();
  EXPECT_EQ(s.device_slots, 2);
  EXPECT_EQ(s.device_snapshots, 2);
  EXPECT_GT(s.snapshot_spills, 0);
  EXPECT_EQ(s.snapshots, ref.stats().snapshots);
  EXPECT_GT(ref.stats().hit_tokens, 0);
  EXPECT_EQ(s.hit_tokens, ref.stats().hit_tokens);
}

}  // namespace
}  // namespace ft
