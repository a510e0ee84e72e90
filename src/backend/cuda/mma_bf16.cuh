// bf16 tensor-core fragments shared by the flash prefill (attention_flash.cu) and the GQA
// decode kernel (attention_decode_gqa.cu): ldmatrix loads of 8x8 tiles, mma.sync m16n8k16
// with f32 accumulation, the hi + lo bf16 split that keeps f32 operands (Q, P) exact to ~16
// bits of mantissa through two MMAs, and the flash step both take per key tile (online
// softmax, O += P V).
#pragma once
#include <cuda_bf16.h>
#include <stdint.h>

#include <type_traits>

namespace ft::cuda {

// fn(std::integral_constant<int, HD>{}) for the head dims both kernels are built for (32, 64,
// 128, 256): their launchers' dispatch. False (fn not called) for any other head dim.
template <class Fn>
bool with_head_dim(int64_t head_dim, Fn&& fn) {
  switch (head_dim) {
    case 32:
      fn(std::integral_constant<int, 32>{});
      return true;
    case 64:
      fn(std::integral_constant<int, 64>{});
      return true;
    case 128:
      fn(std::integral_constant<int, 128>{});
      return true;
    case 256:
      fn(std::integral_constant<int, 256>{});
      return true;
    default:
      return false;
  }
}

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
// d += a b: A 16x16 bf16 (row), B 16x8 bf16 (col), D 16x8 f32.
__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                    uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}
// (a, b) as bf16 pairs hi (rounded) and lo (the remainders, rounded).
__device__ __forceinline__ void split_bf16(float a, float b, uint32_t& hi, uint32_t& lo) {
  __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
  hi = *reinterpret_cast<uint32_t*>(&h);
  lo = pack_bf16(a - __low2float(h), b - __high2float(h));
}

// The online-softmax step of a warp's 16-row MMA tile: a thread holds rows a (gid) and b
// (gid + 8) of NT 8-key accumulator tiles s, scores in log2 units with masked keys -inf. Updates
// the rows' running max m and sum l (this thread's columns; the quad sums them at the end),
// rescales o and leaves the probabilities in s. A row with no key yet keeps m = -inf and is
// exponentiated against 0 (its probabilities are all 0).
template <int NT, int DT>
__device__ __forceinline__ void online_softmax(float (&s)[NT][4], float& m_a, float& m_b,
                                               float& l_a, float& l_b, float (&o)[DT][4]) {
  float mx_a = -INFINITY, mx_b = -INFINITY;
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    mx_a = fmaxf(mx_a, fmaxf(s[j][0], s[j][1]));
    mx_b = fmaxf(mx_b, fmaxf(s[j][2], s[j][3]));
  }
#pragma unroll
  for (int o2 = 1; o2 < 4; o2 <<= 1) {  // a quad shares a row
    mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, o2));
    mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, o2));
  }
  const float mn_a = fmaxf(m_a, mx_a), mn_b = fmaxf(m_b, mx_b);
  const float base_a = mn_a == -INFINITY ? 0.f : mn_a, base_b = mn_b == -INFINITY ? 0.f : mn_b;
  const float c_a = exp2f(m_a - base_a), c_b = exp2f(m_b - base_b);
  m_a = mn_a, m_b = mn_b;
  float sum_a = 0.f, sum_b = 0.f;
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    s[j][0] = exp2f(s[j][0] - base_a), s[j][1] = exp2f(s[j][1] - base_a);
    s[j][2] = exp2f(s[j][2] - base_b), s[j][3] = exp2f(s[j][3] - base_b);
    sum_a += s[j][0] + s[j][1];
    sum_b += s[j][2] + s[j][3];
  }
  l_a = l_a * c_a + sum_a;
  l_b = l_b * c_b + sum_b;
#pragma unroll
  for (int j = 0; j < DT; ++j) o[j][0] *= c_a, o[j][1] *= c_a, o[j][2] *= c_b, o[j][3] *= c_b;
}

// o += A V for each of the NA A operands in turn (16 rows x 16 keys each), V the keys' 16 rows
// at v in shared memory (PITCH elements apart), HD wide.
template <int HD, int PITCH, int NA>
__device__ __forceinline__ void mma_av16(float (&o)[HD / 8][4], const uint32_t (&a)[NA][4],
                                         const __nv_bfloat16* v) {
  const int lane = threadIdx.x & 31;
  const __nv_bfloat16* row = v + ((lane & 7) + ((lane >> 3) & 1) * 8) * PITCH + (lane >> 4) * 8;
#pragma unroll
  for (int n0 = 0; n0 < HD; n0 += 16) {
    uint32_t vb[4];
    ldsm_x4_t(vb, smem_u32(row + n0));
#pragma unroll
    for (int i = 0; i < NA; ++i) {
      mma(o[n0 / 8], a[i], vb[0], vb[1]);
      mma(o[n0 / 8 + 1], a[i], vb[2], vb[3]);
    }
  }
}

// o += P V over 16 keys: P is the probabilities of two accumulator tiles (keys 0-7 and 8-15;
// the accumulator layout of S is the A operand layout of P) as bf16 lo, then hi.
template <int HD, int PITCH>
__device__ __forceinline__ void mma_pv16(float (&o)[HD / 8][4], const float (&s0)[4],
                                         const float (&s1)[4], const __nv_bfloat16* v) {
  uint32_t p[2][4];  // lo, hi
  split_bf16(s0[0], s0[1], p[1][0], p[0][0]);
  split_bf16(s0[2], s0[3], p[1][1], p[0][1]);
  split_bf16(s1[0], s1[1], p[1][2], p[0][2]);
  split_bf16(s1[2], s1[3], p[1][3], p[0][3]);
  mma_av16<HD, PITCH, 2>(o, p, v);
}

// mma_pv16 for a tile whose rows 8-15 are rows 0-7's low parts (the GQA decode kernel's
// packed layout, groups of at most 8 heads): the A operand takes P's hi as row gid and its lo
// as row gid + 8, so one MMA per 8 columns adds P_hi V into o rows 0-7 and P_lo V into rows
// 8-15 (the caller sums the halves at the end). Only s0 / s1's row-gid values are read.
template <int HD, int PITCH>
__device__ __forceinline__ void mma_pv16_packed(float (&o)[HD / 8][4], const float (&s0)[4],
                                                const float (&s1)[4], const __nv_bfloat16* v) {
  uint32_t p[1][4];
  split_bf16(s0[0], s0[1], p[0][0], p[0][1]);
  split_bf16(s1[0], s1[1], p[0][2], p[0][3]);
  mma_av16<HD, PITCH, 1>(o, p, v);
}

}  // namespace ft::cuda
