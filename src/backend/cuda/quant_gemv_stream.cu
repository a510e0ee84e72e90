// quant_gemv_stream: the one-token quantized GEMV with int8 activations (decode, and the routed
// experts' form: one token per slot), launched by quant_gemv_q8.cu's launch_q8. Each warp owns
// a contiguous run of rows (an even split over every warp that fits on the GPU at once, so
// there is no second wave) and streams them in 2 or 4 KiB chunks through a k_stages-deep
// cp.async ring in shared memory (no register staging; the chunks of the next rows load while
// this one's math runs; rows of 1/16 to 1/2 of a chunk go several to a chunk, summed per row
// over the lanes that hold its units). Every lane takes whole groups of G consecutive
// 32-element units (quant_dot32.cuh: a unit is a 32-element block, a 256-element block's
// sub-block, two NVFP4 blocks; G = unit_group<F>: 1, the 2, 4 or 8 sub-blocks of a K-quant
// block that share its code bytes, or 4 blocks for Wide<F>: MXFP4 / NVFP4 rows of whole
// groups), lane l the chunk's groups l, l + 32, ...; the activations
// are quantized per block into shared memory once (int8 codes in the format's order, scales
// per 16 elements, or per 32 for the nibble-codebook formats, XUnit).
#include <algorithm>
#include <atomic>

#include "backend/cuda/quant_device.cuh"
#include "backend/cuda/quant_dot32.cuh"
#include "backend/cuda/quant_gemv.cuh"

namespace ft::cuda::qgemv {

namespace {
constexpr int k_threads = 32 * k_warps;
constexpr int k_stages = 3;

template <class F>
struct SGeometry {
  using Block = typename F::Block;
  static constexpr int kBB = sizeof(Block);
  static constexpr int kUPB = units_per_block<F>(), kBPU = blocks_per_unit<F>();
  static constexpr int kUB2 = 2 * kBB * kBPU / kUPB;  // twice the bytes per unit
  // Units per lane per chunk: about k_schunk_bytes per chunk. Measured on the H200 (sm_90):
  // 4 KiB chunks are faster for the formats of >= 5 bits (units of >= 20 bytes: Q8_0 4096x14336
  // 57 -> 63% of the copy bandwidth, Q4_1 98304x2048 65 -> 74%), 2 KiB for the 4-bit and
  // smaller ones (MXFP4 / Q4_K 98304x2048: 48 / 58% vs 50 / 54%, Q4_0 62 vs 57%).
  static constexpr int k_schunk_bytes = kUB2 >= 40 ? 4096 : 2048;
  static constexpr int kUPL0 = (2 * k_schunk_bytes / 32 + kUB2 / 2) / kUB2;
  static constexpr int kG = unit_group<F>();  // units a lane takes at once
  // The nearest multiple of kG, ties up: Q2_K's 6 -> 8 units per lane (a 2.6 KiB chunk) measured
  // 73% of the copy bandwidth on 98304x2048 against 61% at 4, now that the per-chunk costs are
  // the larger part of its instructions (Q3_K's 5 -> its group of 8, a 3.4 KiB chunk).
  static constexpr int kUPL1 = (kUPL0 + kG / 2) / kG * kG;
  static constexpr int kUPL = kUPL1 < kG ? kG : (kUPL1 > 8 ? 8 : kUPL1);
  static constexpr int kGPL = kUPL / kG;  // unit groups per lane per chunk
  static constexpr int kCB = 32 * kUPL * kBPU / kUPB;  // blocks per chunk
  static constexpr int kBuf = (kCB * kBB + 15) / 16 * 16 + 32;  // + misalignment + ld slack
  static constexpr int kVpl = (kBuf / 16 + 31) / 32;
  static constexpr size_t kStageSmem = size_t{k_warps} * k_stages * kBuf;
  static_assert(32 * kUPL * kBPU % kUPB == 0, "a chunk is whole blocks");
};

// Activations for the streaming kernel, per 32-element unit u, in tiles of 32 G units (G =
// unit_group<F>, units rounded up to whole tiles): unit u = 32 G t + G l + k (lane l's group
// of G units, unit k of it) is slot 64 G t + 64 k + l, so a warp's lanes read consecutive
// slots. Its two 16-byte pieces of int8 codes are at that slot and 32 after it, then, past all
// the codes, a float4 {dx0, dx1, dx0 * S0, dx1 * S1} per unit at index 32 G t + 32 k + l.
template <int G>
__host__ __device__ inline int64_t sunits(int64_t cols) {
  return (cols / 32 + 32 * G - 1) / (32 * G) * (32 * G);
}
template <int G>
__device__ __forceinline__ int xslot(int u) {  // the unit's index in its piece / scale arrays
  const int t = u / (32 * G), r = u - 32 * G * t;
  return 32 * G * t + 32 * (r % G) + r / G;
}
template <class F>
size_t sact_smem(int64_t cols) {
  return static_cast<size_t>(sunits<unit_group<F>()>(cols) * 48);
}

// x (one token; with xu: silu(x) * xu) -> per 32-element unit int8 codes q = rint(x * 127 /
// amax per 16 elements, or per 32 for NIBBLE_PAIRS formats) in x_order<F>, and {dx0, dx1,
// dx0 * S0, dx1 * S1} (dx = amax / 127, S: the halves' code sums). T threads per unit (T = 4
// or 2 when that makes one pass over the block: a short chain per thread for the small
// matrices that wait on it, the experts'), thread t of the T making code bytes 32 t / T ..
// (words 8 t / T ..): elements 32 t / T .. (NATURAL), or 16 t / T .. and 16 + 16 t / T ..
// (NIBBLE_PAIRS); amax and the sums reduce over the T threads.
template <class F, int T>
__device__ __forceinline__ void quantize_acts_t(const float* __restrict__ x,
                                                const float* __restrict__ xu, int64_t cols,
                                                uint8_t* xsm) {
  constexpr bool nat = x_order<F>() == XOrder::NATURAL;
  constexpr int G = unit_group<F>(), E = 32 / T, W = 8 / T;  // elements, words per thread
  const int nu = static_cast<int>(cols / 32);
  uint32_t* words = reinterpret_cast<uint32_t*>(xsm);
  float4* scales = reinterpret_cast<float4*>(xsm + 32 * sunits<G>(cols));
  const int t = threadIdx.x % T;
  const unsigned team = ((1u << T) - 1) << (threadIdx.x & 31 & ~(T - 1));
  for (int u = threadIdx.x / T; u < nu; u += blockDim.x / T) {  // uniform over the team
    float f[E];  // f[i]: element nat ? E t + i : (i < E / 2 ? E t / 2 + i : 16 + E t / 2 + i - E / 2)
#pragma unroll
    for (int k = 0; k < E / 4; ++k) {
      const int e = nat ? E * t + 4 * k : (k < E / 8 ? E / 2 * t + 4 * k : 16 + E / 2 * t + 4 * k - E / 2);
      float4 v = __ldg(reinterpret_cast<const float4*>(x + 32 * int64_t{u} + e));
      if (xu) v = silu_mul4(v, __ldg(reinterpret_cast<const float4*>(xu + 32 * int64_t{u} + e)));
      f[4 * k] = v.x, f[4 * k + 1] = v.y, f[4 * k + 2] = v.z, f[4 * k + 3] = v.w;
    }
    auto half = [&](int i) { return nat ? E * t + i >= 16 : i >= E / 2; };  // f[i]'s half
    float a0 = 0.f, a1 = 0.f;
#pragma unroll
    for (int i = 0; i < E; ++i) {
      if (half(i)) a1 = fmaxf(a1, fabsf(f[i]));
      else a0 = fmaxf(a0, fabsf(f[i]));
    }
#pragma unroll
    for (int o = 1; o < T; o <<= 1) {
      a0 = fmaxf(a0, __shfl_xor_sync(team, a0, o));
      a1 = fmaxf(a1, __shfl_xor_sync(team, a1, o));
    }
    if (!nat) a0 = a1 = fmaxf(a0, a1);  // per 32: the code words mix the halves
    const float inv0 = a0 > 0.f ? 127.f / a0 : 0.f, inv1 = a1 > 0.f ? 127.f / a1 : 0.f;
    int q[E], s0 = 0, s1 = 0;
#pragma unroll
    for (int i = 0; i < E; ++i) {
      q[i] = __float2int_rn(f[i] * (half(i) ? inv1 : inv0));
      if (half(i)) s1 += q[i];
      else s0 += q[i];
    }
#pragma unroll
    for (int o = 1; o < T; o <<= 1) {
      s0 += __shfl_xor_sync(team, s0, o);
      s1 += __shfl_xor_sync(team, s1, o);
    }
    uint32_t wd[W] = {};
#pragma unroll
    for (int b = 0; b < E; ++b)  // code byte E t + b: f[b], or f[b / 2 + (b % 2) E / 2]
      wd[b / 4] |= (static_cast<uint32_t>(q[nat ? b : b / 2 + (b % 2) * (E / 2)]) & 0xffu) << (8 * (b % 4));
    // words 0..3 at piece slot, 4..7 at slot + 32 (16 bytes each)
    const int si = xslot<G>(u), slot = 64 * (si >> 5) + (si & 31);
    if constexpr (W == 8) {
      reinterpret_cast<uint4*>(words)[slot] = make_uint4(wd[0], wd[1], wd[2], wd[3]);
      reinterpret_cast<uint4*>(words)[slot + 32] = make_uint4(wd[4], wd[5], wd[6], wd[7]);
    } else if constexpr (W == 4) {
      reinterpret_cast<uint4*>(words)[slot + 32 * t] = make_uint4(wd[0], wd[1], wd[2], wd[3]);
    } else {
      reinterpret_cast<uint2*>(words)[2 * (slot + 32 * (t >> 1)) + (t & 1)] = make_uint2(wd[0], wd[1]);
    }
    if (t == 0) {
      const float dx0 = a0 * (1.f / 127.f), dx1 = a1 * (1.f / 127.f);
      scales[si] = make_float4(dx0, dx1, dx0 * i2f(s0), dx1 * i2f(s1));
    }
  }
}
template <class F>
__device__ __forceinline__ void quantize_acts32(const float* __restrict__ x,
                                                const float* __restrict__ xu, int64_t cols,
                                                uint8_t* xsm) {
  const int64_t nu = cols / 32;
  if (4 * nu <= blockDim.x) quantize_acts_t<F, 4>(x, xu, cols, xsm);
  else if (2 * nu <= blockDim.x) quantize_acts_t<F, 2>(x, xu, cols, xsm);
  else quantize_acts_t<F, 1>(x, xu, cols, xsm);
}

// A lane's group of units' activations in shared memory (pieces: unit 0's first code piece,
// scales: its float4): x(k) loads unit k's.
struct XSmem {
  const uint4* pieces;
  const float4* scales;
  __device__ __forceinline__ XUnit operator()(int k) const {
    XUnit x;
    const uint4 a = pieces[64 * k], b = pieces[64 * k + 32];
    x.q[0] = a.x, x.q[1] = a.y, x.q[2] = a.z, x.q[3] = a.w;
    x.q[4] = b.x, x.q[5] = b.y, x.q[6] = b.z, x.q[7] = b.w;
    const float4 sc = scales[32 * k];
    x.dx0 = sc.x, x.dx1 = sc.y, x.s0 = sc.z, x.s1 = sc.w;
    return x;
  }
};

// This lane's unit groups of one chunk (nu units, all of them when FULL) at block alignment A:
// v[i] gets the dot of units G g .. G g + G - 1, g = lane + 32 i (0 past nu; G =
// unit_group<F>). Their activations: units xu0 + G g .. of the row (xu0 a multiple of 32 G),
// or in a chunk of whole rows (ROWS) units jrow[i] .. (the group's index in its row).
template <class F, int A, bool FULL, bool ROWS>
__device__ __forceinline__ void chunk_units(const uint8_t* buf, int nu, int64_t xu0,
                                            const int (&jrow)[SGeometry<F>::kGPL],
                                            const uint8_t* xsm, const float4* xscales, int lane,
                                            const Tables& tb, float (&v)[SGeometry<F>::kGPL]) {
  using Gm = SGeometry<F>;
  constexpr int G = Gm::kG;
#pragma unroll
  for (int i = 0; i < Gm::kGPL; ++i) {
    v[i] = 0.f;
    const int u = G * (lane + 32 * i);
    if (!FULL && u >= nu) continue;
    const int si = xslot<G>(static_cast<int>(ROWS ? jrow[i] : xu0 + u));  // unit k: si + 32 k
    const XSmem x{reinterpret_cast<const uint4*>(xsm) + 64 * (si >> 5) + (si & 31), xscales + si};
    const uint8_t* blk = buf + (u / Gm::kUPB) * Gm::kBPU * Gm::kBB;
    v[i] = dot_units<F, A>(blk, u % Gm::kUPB, x, tb);
  }
}

// chunk_units at the chunk's alignment (al: kAl-aligned) and fullness.
template <class F, bool ROWS>
__device__ __forceinline__ void chunk_units_at(bool al, const uint8_t* buf, int nu, int64_t xu0,
                                               const int (&jrow)[SGeometry<F>::kGPL],
                                               const uint8_t* xsm, const float4* xscales,
                                               int lane, const Tables& tb,
                                               float (&v)[SGeometry<F>::kGPL]) {
  constexpr int kAl = block_align<F>(), full = 32 * SGeometry<F>::kUPL;
  if (nu == full) {
    if (al) chunk_units<F, kAl, true, ROWS>(buf, nu, xu0, jrow, xsm, xscales, lane, tb, v);
    else chunk_units<F, 1, true, ROWS>(buf, nu, xu0, jrow, xsm, xscales, lane, tb, v);
  } else {  // a row's last, partial chunk, or fewer rows than a chunk holds
    if (al) chunk_units<F, kAl, false, ROWS>(buf, nu, xu0, jrow, xsm, xscales, lane, tb, v);
    else chunk_units<F, 1, false, ROWS>(buf, nu, xu0, jrow, xsm, xscales, lane, tb, v);
  }
}

// Rows mode's sums of a chunk's rows when the lanes' values fall in rows by lane bits: R values
// t[k] per lane (R a power of two, R <= 2 top), value k of lane l in row k * kstride + lrow:
// with ng < 32 groups per row, top = ng / 2, kstride = 32 / ng and lrow = l / ng; with ng >= 32,
// top = 16, kstride = 1, lrow = 0 (the caller summed each row's values; RowsRedAt). The R rows
// are reduced together ("transpose-reduce"): at each of the first log2 R shuffle steps
// (offsets top, top / 2, ...) a lane keeps the half of its values selected by its lane bit and
// adds its partner's copy of that half, then a plain butterfly over the offsets left: R - 1 +
// log2(2 top / R) shuffles for R rows, against log2(2 top) per row. put(row, sum) is called by
// the one lane per row whose remaining offset bits are 0, so the rows' stores are one
// instruction (the per-row warp sums and stores were ~30% of IQ4_NL's instructions on
// 98304x2048).
struct RowsRedAt {
  int top, kstride, lrow;
};
template <int R, class Put>
__device__ __forceinline__ void rows_reduce(float (&t)[R], RowsRedAt at, int lane, Put&& put) {
  const int top = at.top;
  int k = 0, o = top;
#pragma unroll
  for (int n = R; n > 1; n /= 2, o >>= 1) {
    const bool up = (lane & o) != 0;
#pragma unroll
    for (int j = 0; j < n / 2; ++j) {
      const float send = up ? t[j] : t[j + n / 2], keep = up ? t[j + n / 2] : t[j];
      t[j] = keep + __shfl_xor_sync(0xffffffffu, send, o);
    }
    if (up) k += n / 2;
  }
  float s = t[0];
  for (int b = o; b >= 1; b >>= 1) s += __shfl_xor_sync(0xffffffffu, s, b);
  if ((lane & (2 * o - 1)) == 0) put(k * at.kstride + at.lrow, s);
}

// The rows-mode reduction classes (warp-uniform; see rows_reduce): ng groups per row, GPL per
// lane (a power of two <= 8, else GENERAL). LONG<Q>: ng = 32 Q, R = GPL / Q rows per chunk;
// NARROW: ng a power of two in [GPL, 16], R = GPL; GENERAL: a warp sum per row.
enum class RowsRed { GENERAL, LONG1, LONG2, LONG4, NARROW };
template <int GPL>
__device__ inline RowsRed rows_red(int ng) {
  static_assert(GPL <= 8, "SGeometry caps the units per lane at 8");
  const bool pow2 = (GPL & (GPL - 1)) == 0;  // R must be a power of two
  if (pow2 && ng == 32 && 1 < GPL) return RowsRed::LONG1;
  if (pow2 && ng == 64 && 2 < GPL) return RowsRed::LONG2;
  if (pow2 && ng == 128 && 4 < GPL) return RowsRed::LONG4;
  if (pow2 && ng >= GPL && ng <= 16 && (ng & (ng - 1)) == 0) return RowsRed::NARROW;
  return RowsRed::GENERAL;
}
template <int GPL, int Q, class Put>
__device__ __forceinline__ void rows_long(const float (&v)[GPL], int lane, Put&& put) {
  if constexpr (Q < GPL) {
    float t[GPL / Q];
#pragma unroll
    for (int k = 0; k < GPL / Q; ++k) {
      t[k] = v[k * Q];
#pragma unroll
      for (int j = 1; j < Q; ++j) t[k] += v[k * Q + j];
    }
    rows_reduce<GPL / Q>(t, RowsRedAt{16, 1, 0}, lane, put);
  }
}

template <class F>
__global__ void __launch_bounds__(k_threads, 3) qgemv_stream_kernel(const __grid_constant__ QParams p) {
  using Gm = SGeometry<F>;
  constexpr int BB = Gm::kBB, CB = Gm::kCB, BUF = Gm::kBuf, S = k_stages, UPL = Gm::kUPL;
  constexpr int G = Gm::kG, GPL = Gm::kGPL;
  constexpr int kAl = block_align<F>();
  extern __shared__ __align__(16) uint8_t smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  uint8_t* wbuf = smem + warp * S * BUF;
  uint8_t* xsm = smem + Gm::kStageSmem;
  const int64_t cols = p.cols;
  const int nb = static_cast<int>(cols / F::kElems);
  const int nchunk = (nb + CB - 1) / CB;
  // Rows of at most half a chunk (and at least 1/16): chunks of rpc whole rows, contiguous in
  // memory, so short rows (an expert's down projection: 24 units) do not leave lanes idle.
  // Lane group lane + 32 i (units G (lane + 32 i) ..) then belongs to row rowi[i] of the chunk,
  // as its units jrow[i] .. (a row is whole groups: G divides a block's units).
  const int units = nb * Gm::kUPB / Gm::kBPU;
  const bool rows_mode = 2 * units <= 32 * UPL && 32 * UPL <= 16 * units;
  const int rpc = rows_mode ? 32 * UPL / units : 1;
  const RowsRed red = rows_mode ? rows_red<GPL>(units / G) : RowsRed::GENERAL;
  const int ngr = units / G < 32 ? units / G : 32;  // NARROW's lanes per row (divisions once)
  const RowsRedAt narrow{ngr / 2, 32 / ngr, lane / ngr};
  int rowi[GPL], jrow[GPL];
#pragma unroll
  for (int i = 0; i < GPL; ++i) {
    const int u = G * (lane + 32 * i);
    rowi[i] = rows_mode ? u / units : 0;
    jrow[i] = rows_mode ? u - rowi[i] * units : 0;
  }
  // Row indices are 32-bit (launch_f checks the total): the cursors' compares and steps are
  // single instructions.
  const int total = static_cast<int>(p.rows0[p.count]);
  const int r0 = (static_cast<int>(blockIdx.x) * k_warps + warp) * p.rows_per_warp;
  const int r1 = r0 + p.rows_per_warp < total ? r0 + p.rows_per_warp : total;
  size_t eoff = 0;  // experts form: the slot's expert

  // A cursor over the warp's chunks: row r (of matrix m) and chunk c of the row; abase: matrix
  // m's first byte rounded down to 16, off: the row's first byte and end: the matrix's end, in
  // bytes from abase (32-bit: launch_f checks the sizes); lim: the warp's last row + 1 in matrix
  // m. Rows of a matrix are contiguous, so it steps by offset, locating a matrix only when it
  // enters one.
  const uint32_t rb = static_cast<uint32_t>(p.row_bytes);
  struct Cur {
    int r, lim, m, c;
    const uint8_t* abase;
    uint32_t off, end;
  };
  auto locate = [&](Cur& k) {
    while (k.m + 1 < p.count && k.r >= p.rows0[k.m + 1]) ++k.m;
    const uint8_t* base = p.w[k.m] + eoff;
    const uint32_t mis = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(base) & 15);
    const int rm0 = static_cast<int>(p.rows0[k.m]), rm1 = static_cast<int>(p.rows0[k.m + 1]);
    k.abase = base - mis;
    k.off = mis + static_cast<uint32_t>(k.r - rm0) * rb;
    k.end = mis + static_cast<uint32_t>(rm1 - rm0) * rb;
    k.lim = r1 < rm1 ? r1 : rm1;
  };
  auto start = [&](Cur& k) {
    k.r = r0, k.m = 0, k.c = 0;
    locate(k);
  };
  // The chunk at k: its rows (within the warp's range and the matrix), first block and blocks.
  auto span = [&](const Cur& k, int& nrows, int& b0, int& nbc) {
    if (rows_mode) {
      nrows = k.lim - k.r < rpc ? k.lim - k.r : rpc;
      b0 = 0, nbc = nrows * nb;
    } else {
      nrows = 1, b0 = k.c * CB, nbc = nb - b0 < CB ? nb - b0 : CB;
    }
  };
  auto advance = [&](Cur& k, int nrows) {
    if (rows_mode) {
      k.r += nrows, k.off += static_cast<uint32_t>(nrows) * rb;
    } else if (++k.c == nchunk) {
      k.c = 0, ++k.r, k.off += rb;
    }
    if (k.r >= k.lim && k.r < r1) locate(k);  // the next matrix
  };

  Cur ld;  // load cursor: the next chunk to issue
  start(ld);
  const uint32_t sbuf = static_cast<uint32_t>(__cvta_generic_to_shared(wbuf)) + 16 * lane;
  int ist = 0;  // its stage
  auto issue = [&]() {  // one commit group per call (empty past the last chunk)
    if (ld.r < r1) {
      int nrows, b0, nbc;
      span(ld, nrows, b0, nbc);
      const uint32_t so = ld.off + static_cast<uint32_t>(b0 * BB), ao = so & ~15u;
      const int nv = static_cast<int>((so - ao + static_cast<uint32_t>(nbc * BB) + 15) >> 4);
      const uint32_t dst = sbuf + ist * BUF;  // lane's first vector, then every 512 bytes
      const uint32_t go = ao + 16 * lane;
      const uint8_t* g = ld.abase + go;
      if (ao + 16 * static_cast<uint32_t>(nv) <= ld.end) {  // whole vectors in the matrix
#pragma unroll
        for (int j = 0; j < Gm::kVpl; ++j)
          if (lane + 32 * j < nv) cp_async16(dst + 512 * j, g + 512 * j);
      } else {
#pragma unroll
        for (int j = 0; j < Gm::kVpl; ++j) {
          if (lane + 32 * j < nv) {
            const int64_t left = int64_t{ld.end} - (go + 512 * j);
            const int n = left >= 16 ? 16 : (left > 0 ? static_cast<int>(left) : 0);
            cp_async16(dst + 512 * j, g + 512 * j, n);
          }
        }
      }
      ist = ist + 1 == S ? 0 : ist + 1;
      advance(ld, nrows);
    }
    cp_async_commit();
  };

  const float* x = p.x;
  const float* xu = p.x_up;
  int64_t yoff = 0;
  // Weights are immutable: in flight before the wait, an expert's too when its id is already
  // final (ids_early).
  const int64_t e_early = p.ids && p.ids_early ? p.ids[blockIdx.y] : -1;
  if (e_early >= 0) {
    eoff = static_cast<size_t>(e_early) * p.expert_bytes;
    start(ld);
  }
  if (!p.ids || e_early >= 0)
    for (int k = 0; k < S - 1; ++k) issue();
  pdl_wait();
  pdl_trigger();
  if (p.ids) {
    const int64_t s = blockIdx.y, e = p.ids_early ? e_early : p.ids[s];
    yoff = s * p.y_slot;
    if (e < 0) {  // computed elsewhere: contributes nothing
      for (int r = r0 + lane; r < r1; r += 32) {
        int m = 0;
        while (m + 1 < p.count && r >= p.rows0[m + 1]) ++m;
        p.y[m][yoff + r - p.rows0[m]] = 0.f;
      }
      return;
    }
    if (!p.ids_early) {
      eoff = static_cast<size_t>(e) * p.expert_bytes;
      start(ld);
      for (int k = 0; k < S - 1; ++k) issue();
    }
    x += (s / p.x_div) * p.x_slot;
    if (xu) xu += (s / p.x_div) * p.x_slot;
  }
  quantize_acts32<F>(x, xu, cols, xsm);
  __syncthreads();
  if (r0 >= r1) return;

  const float4* xscales = reinterpret_cast<const float4*>(xsm + 32 * sunits<G>(cols));
  const Tables tb = tables<F>(threadIdx.x >> 10);  // a runtime 0 per thread (not a uniform register)
  auto store = [&](int m, int r, float s) {  // row r (of the whole run) of matrix m is done
    const int row = r - static_cast<int>(p.rows0[m]);
    if constexpr (quant_ext<F>() == QuantExt::GLOBAL) s *= p.gscale[m];
    if (p.bias[m]) s += p.bias[m][row];
    float* o = p.y[m] + yoff + row;
    *o = p.accumulate[m] ? *o + s : s;
  };
  Cur cp;  // compute cursor
  start(cp);
  int cst = 0;  // its stage
  float acc = 0.f;
  while (cp.r < r1) {
    issue();  // step + S - 1 into the stage step - 1 left
    cp_async_wait<S - 1>();
    __syncwarp();
    int nrows, b0, nbc;
    span(cp, nrows, b0, nbc);
    const uint8_t* buf = wbuf + cst * BUF + ((cp.off + static_cast<uint32_t>(b0 * BB)) & 15);
    cst = cst + 1 == S ? 0 : cst + 1;
    const int nu = nbc * Gm::kUPB / Gm::kBPU;
    const int64_t xu0 = int64_t{b0} * Gm::kUPB / Gm::kBPU;
    // Every block of the chunk shares buf's alignment modulo kAl (uniform over the warp).
    const bool al = kAl > 1 && (reinterpret_cast<uintptr_t>(buf) & (kAl - 1)) == 0;
    float v[GPL];
    if (rows_mode)
      chunk_units_at<F, true>(al, buf, nu, xu0, jrow, xsm, xscales, lane, tb, v);
    else
      chunk_units_at<F, false>(al, buf, nu, xu0, jrow, xsm, xscales, lane, tb, v);
    __syncwarp();
    if (rows_mode && red != RowsRed::GENERAL) {  // whole rows, reduced together
      auto put = [&](int rr, float sum) {
        if (rr < nrows) store(cp.m, cp.r + rr, sum);
      };
      if (red == RowsRed::NARROW) rows_reduce<GPL>(v, narrow, lane, put);
      else if (red == RowsRed::LONG1) rows_long<GPL, 1>(v, lane, put);
      else if (red == RowsRed::LONG2) rows_long<GPL, 2>(v, lane, put);
      else rows_long<GPL, 4>(v, lane, put);
    } else if (rows_mode) {  // whole rows: a warp sum per row over the lanes' units in it
      for (int rr = 0; rr < nrows; ++rr) {
        float t = 0.f;
#pragma unroll
        for (int i = 0; i < GPL; ++i)
          if (rowi[i] == rr) t += v[i];
        t = warp_sum(t);
        if (lane == 0) store(cp.m, cp.r + rr, t);
      }
    } else {
#pragma unroll
      for (int i = 0; i < GPL; ++i) acc += v[i];
      if (cp.c + 1 == nchunk) {
        acc = warp_sum(acc);
        if (lane == 0) store(cp.m, cp.r, acc);
        acc = 0.f;
      }
    }
    advance(cp, nrows);
  }
  cp_async_wait<0>();
}


// The streaming kernel for one token on format F; false when its shared memory does not fit.
template <class F>
bool launch_f(QParams& p, int64_t slots) {
  using Gm = SGeometry<F>;
  if (p.cols % 32 != 0) return false;  // whole 32-element units
  const size_t dyn = Gm::kStageSmem + sact_smem<F>(p.cols);
  static const int sms = sm_count();
  static const int smem_sm = device_attribute(cudaDevAttrMaxSharedMemoryPerMultiprocessor);
  static const int smem_block = device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin);
  if (dyn > static_cast<size_t>(smem_block)) return false;
  static const int regs = [] {
    cudaFuncAttributes a{};
    CUDA_CHECK(cudaFuncGetAttributes(&a, qgemv_stream_kernel<F>));
    return a.numRegs;
  }();
  // Blocks resident per SM (<= 3 by the launch bounds; registers in warps of 32 x a multiple of
  // 8; shared memory with the runtime's 1 KiB per block), then an even split of the rows over
  // all their warps: one wave. (Launching every resident block with the rows split to the row
  // over all their warps measured slower on the H200: 4096x14336 MXFP4 / IQ4_XS 38 / 35 -> 24
  // / 24% of the copy bandwidth, every extra block quantizing the 14336 activations again.)
  const int by_regs = 65536 / ((regs + 7) / 8 * 8 * k_threads);
  const int bps = std::clamp(std::min(static_cast<int>(smem_sm / (dyn + 1024)), by_regs), 1, 3);
  const int64_t s = std::max<int64_t>(slots, 1);
  p.rows0[0] = 0;
  for (int m = 0; m < p.count; ++m) p.rows0[m + 1] = p.rows0[m] + p.rows[m];
  const int64_t total = p.rows0[p.count];
  if (total >= (int64_t{1} << 30)) return false;  // the kernel's row indices are 32-bit
  for (int m = 0; m < p.count; ++m)  // and its byte offsets in a matrix
    if (static_cast<uint64_t>(p.rows[m]) * p.row_bytes >= (uint64_t{1} << 32) - (1 << 20))
      return false;
  const int64_t warps = std::max<int64_t>(int64_t{sms} * bps * k_warps / s, 1);  // per slot
  p.rows_per_warp = static_cast<int>((total + warps - 1) / warps);
  const int64_t used = (total + p.rows_per_warp - 1) / p.rows_per_warp;
  const dim3 grid(static_cast<unsigned>((used + k_warps - 1) / k_warps), static_cast<unsigned>(s));
  static std::atomic<uint64_t> opted{0};
  opt_in_smem(qgemv_stream_kernel<F>, smem_block, opted);
  launch_kernel(qgemv_stream_kernel<F>, grid, dim3(k_threads), dyn, p);
  return true;
}
}  // namespace

bool launch_stream(DType dt, QParams& p, int64_t slots) {
  bool launched = false;
  dispatch_quant(dt, [&](auto f) {
    using F = decltype(f);
    if constexpr (has_wide<F>()) {  // rows of whole Wide groups (gpt-oss's 2880: 90 blocks)
      if (p.cols % (32 * unit_group<Wide<F>>()) == 0) {
        launched = launch_f<Wide<F>>(p, slots);
        return;
      }
    }
    if constexpr (has_code_words<F>()) launched = launch_f<F>(p, slots);
  });
  return launched;
}

}  // namespace ft::cuda::qgemv
