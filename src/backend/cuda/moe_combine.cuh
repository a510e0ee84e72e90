// combine_slots: the routed experts' outputs summed into the token rows, shared by the experts
// layers of moe.cu (one dtype) and moe_mixed.cu (a dtype per matrix).
#pragma once
#include <stdint.h>

namespace ft::cuda {

// out[t] (+)= sum_k w[t, k] * d[row(t, k)] for t < tokens, k ascending; row = slot_row[t *
// top_k + k] (prefill's grouped rows; < 0: an id < 0, not computed here) or, with slot_row
// null, the slot itself. A PDL launch on stream().
void combine_slots(const float* d, const int32_t* slot_row, const float* w, int top_k,
                   int64_t hidden, int64_t tokens, bool accumulate, float* out);

}  // namespace ft::cuda
