// Vocab-split lm_head for tensor parallelism: each rank's rows of the output projection, padded
// to one size so an all-gather assembles the logits (model/cuda_transformer.cpp's tp_logits).
#include <algorithm>

#include "base/error.h"
#include "parallel/tp_plan.h"

namespace ft {

int64_t tp_vocab_pad(int64_t vocab, int world) {
  FT_CHECK(vocab > 0 && world > 0, "tp_vocab_pad: vocab {} world {}", vocab, world);
  return (vocab + world - 1) / world;
}

TpRange tp_vocab_range(int64_t vocab, int world, int rank) {
  const int64_t p = tp_vocab_pad(vocab, world);
  return {std::min(vocab, rank * p), std::min(vocab, (rank + 1) * p)};
}

void split_vocab(TpPlan& p, int64_t vocab) {
  if (vocab < p.world)
    fail("--tensor-parallel {}: a vocabulary of {} rows does not split over {} GPUs", p.world,
         vocab, p.world);
  for (TpRank& r : p.ranks) {
    r.vocab = tp_vocab_range(vocab, p.world, r.rank);
    if (r.vocab.size() == 0)  // e.g. 5 rows over 4 ranks: pads of 2 leave the last rank none
      fail("--tensor-parallel {}: {} vocabulary rows in pieces of {} leave GPU {} none", p.world,
           vocab, tp_vocab_pad(vocab, p.world), r.rank);
  }
}

}  // namespace ft
