// Memory planner: Qwen3-30B-A3B-shaped budgets at 8/16/24 GB and all-resident, refusals with
// numbers, overrides, size parsing.
#include <gtest/gtest.h>

#include "base/error.h"
#include "cache/memory_plan.h"

namespace ft {
namespace {

constexpr size_t GiB = 1ull << 30;

MemoryRequest qwen3_30b(size_t budget) {
  MemoryRequest r;
  r.budget = budget;
  r.resident_weights = size_t{2} * 1000 * 1000 * 1000;  // attention + embeddings, bf16
  r.scratch = 512ull << 20;
  r.kv_bytes_per_token = 48 * 2 * 4 * 128 * 2;  // layers x (k,v) x kv heads x head_dim x bf16
  r.kv_reserve_tokens = 32768;
  r.expert_bytes = 3 * 2048 * 768 * 2;
  r.moe_layers = 48;
  r.experts = 128;
  return r;
}

TEST(MemoryPlan, ConsumerBudgetsGiveExpertsTheRest) {
  for (size_t gb : {8, 16, 24}) {
    auto p = plan_memory(qwen3_30b(gb * GiB));
    EXPECT_LE(p.used, gb * GiB);
    EXPECT_GE(p.expert_slots, 128);
    EXPECT_FALSE(p.all_experts_resident);
    EXPECT_EQ(p.kv_tokens, 32768);
    EXPECT_TRUE(p.prefill_double_buffer) << gb;
  }
  EXPECT_GT(plan_memory(qwen3_30b(24 * GiB)).expert_slots,
            plan_memory(qwen3_30b(16 * GiB)).expert_slots);
}

TEST(MemoryPlan, BigCardHoldsEveryExpertAndKvGetsTheRest) {
  auto p = plan_memory(qwen3_30b(80 * GiB));
  EXPECT_TRUE(p.all_experts_resident);
  EXPECT_EQ(p.expert_slots, 48 * 128);
  EXPECT_GT(p.kv_tokens, 32768);
  EXPECT_FALSE(p.prefill_double_buffer);
}

TEST(MemoryPlan, RefusesWithTheNumbers) {
  try {
    plan_memory(qwen3_30b(3 * GiB));
    FAIL();
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("3.00 GiB"), std::string::npos) << m;
    EXPECT_NE(m.find("KV reserve"), std::string::npos) << m;
    EXPECT_NE(m.find("--gpu-memory"), std::string::npos) << m;
  }
}

TEST(MemoryPlan, Overrides) {
  auto r = qwen3_30b(24 * GiB);
  r.slots_override = 300;
  EXPECT_EQ(plan_memory(r).expert_slots, 300);
  r.slots_override = 100;  // below one layer
  EXPECT_THROW(plan_memory(r), Error);
  r.slots_override = -1;
  r.cache_rate = 0.1;
  EXPECT_EQ(plan_memory(r).expert_slots, 615);  // ceil(6144 * 0.1)
  r.cache_rate = 1.0;
  EXPECT_THROW(plan_memory(r), Error);  // all experts do not fit 24 GB
}

TEST(ParseSize, Units) {
  EXPECT_EQ(parse_size("8GiB"), 8 * GiB);
  EXPECT_EQ(parse_size("8g"), 8 * GiB);
  EXPECT_EQ(parse_size("512M"), 512ull << 20);
  EXPECT_EQ(parse_size("1.5 GiB"), GiB * 3 / 2);
  EXPECT_EQ(parse_size("4096"), 4096u);
  EXPECT_THROW(parse_size("lots"), Error);
  EXPECT_THROW(parse_size("8 parsecs"), Error);
}

}  // namespace
}  // namespace ft
