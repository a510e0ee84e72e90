// l2_share (l2_prefetch.cuh) on the host: the parts of a range tile its 16-byte-aligned
// interior in order, with aligned addresses and sizes, for the shapes decode uses (the O
// projection and the router over 32 x used attention blocks) and awkward ones.
#include "backend/cuda/l2_prefetch.cuh"

#include <gtest/gtest.h>

namespace ft::cuda {
namespace {

// Walks every part of [b, b + bytes) over `parts` and checks the tiling.
void check_tiling(uint64_t b, int64_t bytes, int64_t parts) {
  SCOPED_TRACE(testing::Message() << "b " << b << " bytes " << bytes << " parts " << parts);
  const uint64_t lo = (b + 15) / 16 * 16, hi = (b + bytes) / 16 * 16;
  uint64_t at = lo;
  for (int64_t p = 0; p < parts; ++p) {
    const L2Share s = l2_share(b, bytes, p, parts);
    if (s.e <= s.s) {  // empty parts only after the interior is covered
      EXPECT_GE(at, hi);
      continue;
    }
    EXPECT_EQ(s.s, at);  // in order, no gap, no overlap
    EXPECT_EQ(s.s % 16, 0u);
    EXPECT_EQ((s.e - s.s) % 16, 0u);
    EXPECT_LE(s.e, hi);
    at = s.e;
  }
  EXPECT_EQ(at, hi > lo ? hi : lo);
}

TEST(L2Share, TilesTheAlignedInterior) {
  const uint64_t base = uint64_t{1} << 40;  // a device-like address
  const int64_t o_proj = 4096 * 2048 * 2, router = 128 * 2048 * 2;
  for (int64_t parts : {1, 32, 160, 1024}) {
    check_tiling(base, o_proj, parts);
    check_tiling(base, router, parts);
  }
  for (uint64_t off : {1, 8, 15, 17}) {
    for (int64_t bytes : {int64_t{1}, int64_t{16}, int64_t{31}, int64_t{4097}, int64_t{1000003}})
      for (int64_t parts : {1, 3, 7, 64}) check_tiling(base + off, bytes, parts);
  }
}

TEST(L2Share, EmptyAndDegenerateRanges) {
  const L2Share none = l2_share(64, 0, 0, 4);
  EXPECT_GE(none.s, none.e);
  const L2Share tiny = l2_share(65, 20, 0, 1);  // [65, 85): interior [80, 80) is empty
  EXPECT_GE(tiny.s, tiny.e);
  const L2Share no_parts = l2_share(64, 4096, 0, 0);
  EXPECT_GE(no_parts.s, no_parts.e);
}

TEST(L2Share, OnePartStopsAtTheBulkLimit) {
  const uint64_t base = uint64_t{1} << 40;
  const int64_t bytes = int64_t{3} << 30;  // one part of 3 GiB: cut to the size operand's range
  const L2Share s = l2_share(base, bytes, 0, 1);
  EXPECT_EQ(s.s, base);
  EXPECT_EQ(s.e - s.s, k_l2_prefetch_max);
}

}  // namespace
}  // namespace ft::cuda
