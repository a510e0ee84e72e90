// decode_chunk (attention_decode.cuh) on the host: a token's keys split into chunks that cover
// them in order with no gap or overlap, at most max_splits of them and at most one wave's
// share (split.resident over the grid's pairs), none shorter than min_chunk but the last, and
// the blocks past the used chunks empty; with and without a sliding window.
#include <gtest/gtest.h>

#include "backend/cuda/attention_decode.cuh"

namespace ft::cuda {
namespace {

void check_plan(int64_t pos, int64_t window, int64_t max_splits, int64_t resident, int64_t pairs,
                int64_t min_chunk) {
  SCOPED_TRACE(testing::Message() << "pos " << pos << " window " << window << " max_splits "
                                  << max_splits << " resident " << resident << " pairs " << pairs
                                  << " min_chunk " << min_chunk);
  AttentionArgs a{};
  a.window = window;
  a.split.max_splits = max_splits;
  a.split.resident = resident;
  const DecodeChunk first = decode_chunk(a, pos, 0, min_chunk, pairs);
  const int64_t k_lo = window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0;
  EXPECT_EQ(first.k_lo, k_lo);
  EXPECT_EQ(first.k_hi, pos + 1);
  EXPECT_GE(first.used, 1);
  EXPECT_LE(first.used, std::max<int64_t>(max_splits, 1));
  if (max_splits == 0) EXPECT_EQ(first.used, 1);
  if (resident / pairs >= 1) EXPECT_LE(first.used, resident / pairs);
  int64_t at = k_lo;
  for (int64_t s = 0; s < std::max<int64_t>(max_splits, 1); ++s) {
    const DecodeChunk c = decode_chunk(a, pos, s, min_chunk, pairs);
    EXPECT_EQ(c.used, first.used);  // every block agrees on the plan
    if (s >= c.used) {
      EXPECT_GE(c.c0, c.k_hi);  // past the keys: the block exits
      continue;
    }
    EXPECT_EQ(c.c0, at);
    EXPECT_GT(c.c1, c.c0);
    if (max_splits > 0 && s + 1 < c.used) EXPECT_GE(c.c1 - c.c0, min_chunk);
    at = c.c1;
  }
  EXPECT_EQ(at, pos + 1);
}

TEST(DecodeChunk, CoversTheKeysInOneWave) {
  for (int64_t min_chunk : {64, 128})
    for (int64_t max_splits : {0, 1, 4, 32})
      for (int64_t resident : {0, 132, 264, 528})
        for (int64_t pairs : {1, 4, 32, 128})
          for (int64_t window : {0, 100, 4096})
            for (int64_t pos : {0, 1, 63, 64, 127, 128, 129, 511, 4095, 4096, 16383, 100000})
              check_plan(pos, window, max_splits, resident, pairs, min_chunk);
}

}  // namespace
}  // namespace ft::cuda
