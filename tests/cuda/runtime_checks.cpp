// Checks of the decode runtime ops (cuda_checks.h runtime_checks): multi-matrix GEMV with the
// fused residual add, the fused q/k norm + rope + KV store, attention at per-token positions
// of several sequences, the MoE decode path with skipped ids and accumulation, the device
// expert-cache bookkeeping against ExpertCache, and the mapped-memory fetch kernel.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "backend/cpu/kernels.h"
#include "backend/cuda/cuda_ops.h"
#include "base/half.h"
#include "cuda_checks.h"
#include "experts/expert_cache.h"
#include "experts/experts.h"
#include "model/cuda_transformer.h"
#include "model/rope.h"
#include "ops/ops.h"

namespace ft::cuda_checks {

namespace {
using cuda::DeviceBuffer;


// Worst |got - ref| relative to tol; "" when within.
std::string close(const std::vector<float>& got, const std::vector<float>& ref, float rel,
                  const std::string& what) {
  float mx = 0;
  for (float r : ref) mx = std::max(mx, std::fabs(r));
  for (size_t i = 0; i < ref.size(); ++i)
    if (!(std::fabs(got[i] - ref[i]) <= rel * (mx + 1e-6f)))
      return fmt::format("{}: at {} got {} ref {} (max|ref| {})\n", what, i, got[i], ref[i], mx);
  return "";
}

TensorView view(DType dt, int64_t rows, int64_t cols, const void* data) {
  TensorView t;
  t.dtype = dt, t.ndim = 2, t.shape = {rows, cols, 1, 1}, t.data = data, t.name = "w";
  return t;
}

// bf16 bits and their f32 values.
struct Bf16 {
  std::vector<uint16_t> bits;
  std::vector<float> f;
};
Bf16 bf16_rand(size_t n, uint32_t seed, float scale) {
  Bf16 b{std::vector<uint16_t>(n), randv(n, seed, scale)};
  for (size_t i = 0; i < n; ++i) b.bits[i] = f32_to_bf16(b.f[i]), b.f[i] = bf16_to_f32(b.bits[i]);
  return b;
}

// q, k, v GEMVs in one launch plus an accumulating one, vs ops::matmul.
std::string check_gemv_multi() {
  std::string err;
  ThreadPool pool(2, false);
  for (int64_t cols : {64, 200, 7, 4096})  // 4096: two dot_load batches per lane
    for (int64_t n : {1, 2, 4}) {
      const int64_t rows[3] = {37, 16, 9};
      std::vector<Bf16> w;
      for (int m = 0; m < 3; ++m) w.push_back(bf16_rand(rows[m] * cols, 10 * m + cols, 0.5f));
      auto x = randv(n * cols, static_cast<uint32_t>(n + cols));
      auto y2init = randv(n * rows[2], 77);
      auto bias = randv(rows[0], 5);
      DeviceBuffer dx = up(x), db = up(bias), dy0(n * rows[0] * 4), dy1(n * rows[1] * 4),
                   dy2 = up(y2init);
      std::vector<DeviceBuffer> dw;
      for (int m = 0; m < 3; ++m) dw.push_back(up(w[m].bits));
      cuda::GemvOut outs[3];
      float* ys[3] = {dy0.as<float>(), dy1.as<float>(), dy2.as<float>()};
      for (int m = 0; m < 3; ++m)
        outs[m] = {.w = {.data = dw[m].data(), .dtype = DType::BF16, .rows = rows[m], .cols = cols},
                   .y = ys[m],
                   .bias = m == 0 ? db.as<float>() : nullptr,
                   .accumulate = m == 2};
      cuda::gemv_multi(dx.as<float>(), n, outs, 3);
      for (int m = 0; m < 3; ++m) {
        std::vector<float> ref(n * rows[m]);
        const TensorView tv = view(DType::BF16, rows[m], cols, w[m].bits.data());
        ops::matmul(pool, x.data(), n, tv, ref.data(), m == 0 ? bias.data() : nullptr);
        if (m == 2)
          for (size_t i = 0; i < ref.size(); ++i) ref[i] += y2init[i];
        const DeviceBuffer& dy = m == 0 ? dy0 : m == 1 ? dy1 : dy2;
        err += close(down(dy, ref.size()), ref, 1e-5f,
                     fmt::format("gemv_multi m {} n {} cols {}", m, n, cols));
      }
    }
  // With the rmsnorm fused (staged per block; x_out receives the normalised rows).
  for (int64_t cols : {2048, 200, 6000})
    for (int64_t n : {1, 3}) {
      const Bf16 w = bf16_rand(50 * cols, static_cast<uint32_t>(cols), 0.3f);
      auto x = randv(n * cols, 3, 2.f), nw = randv(cols, 4);
      DeviceBuffer dx = up(x), dnw = up(nw), dw = up(w.bits), dy(n * 50 * 4), dxo(n * cols * 4);
      const cuda::GemvOut o{.w = {.data = dw.data(), .dtype = DType::BF16, .rows = 50, .cols = cols},
                            .y = dy.as<float>()};
      const cuda::GemvNorm nrm{.w = dnw.as<float>(), .eps = 1e-6f, .x_out = dxo.as<float>()};
      cuda::gemv_multi(dx.as<float>(), n, &o, 1, &nrm);
      std::vector<float> xn(n * cols), ref(n * 50);
      for (int64_t t = 0; t < n; ++t)
        cpu::k_scalar_kernels.rmsnorm(&x[t * cols], nw.data(), 1e-6f, cols, &xn[t * cols]);
      ops::matmul(pool, xn.data(), n, view(DType::BF16, 50, cols, w.bits.data()), ref.data(),
                  nullptr);
      const std::string what = fmt::format("gemv_multi+norm n {} cols {}", n, cols);
      err += close(down(dy, ref.size()), ref, 2e-5f, what);
      err += close(down(dxo, xn.size()), xn, 1e-5f, what + " x_out");
    }
  return err;
}

// Fused per-head norm + rope + KV store vs rmsnorm rows, Rope::apply and explicit placement.
std::string check_qk_rope() {
  std::string err;
  for (bool norm : {false, true})
    for (bool interleaved : {false, true}) {
      RopeConfig rc;
      rc.interleaved = interleaved;
      rc.partial_rotary_factor = interleaved ? 0.5 : 1.0;
      const int64_t heads = 4, kvh = 2, hd = 64, n = 3, cap = 20, seqs = 2;
      const Rope rope(rc, hd);
      const int64_t qd = heads * hd, kvd = kvh * hd, stride = cap * kvd;
      const std::vector<int32_t> pos = {5, 0, 17}, seq = {1, 0, 1};
      auto q = randv(n * qd, 1), k = randv(n * kvd, 2), v = randv(n * kvd, 3);
      auto qn = randv(hd, 4), kn = randv(hd, 5);
      std::vector<float> cs, sn;
      rope_tables(rope, cap, cs, sn);
      DeviceBuffer dq = up(q), dk = up(k), dv = up(v), dqn = up(qn), dkn = up(kn), dc = up(cs),
                   ds = up(sn), dpos = up(pos), dseq = up(seq);
      std::vector<float> zeros(seqs * stride, 0.f);
      DeviceBuffer kc = up(zeros), vc = up(zeros);
      cuda::qk_rope_store({.q = dq.as<float>(),
                           .k = dk.as<float>(),
                           .v = dv.as<float>(),
                           .n = n,
                           .n_heads = heads,
                           .n_kv_heads = kvh,
                           .head_dim = hd,
                           .rot_dim = static_cast<int64_t>(rope.inv_freq().size()) * 2,
                           .interleaved = interleaved,
                           .cos = dc.as<float>(),
                           .sin = ds.as<float>(),
                           .q_norm = norm ? dqn.as<float>() : nullptr,
                           .k_norm = norm ? dkn.as<float>() : nullptr,
                           .eps = 1e-6f,
                           .pos = dpos.as<int32_t>(),
                           .seq = dseq.as<int32_t>(),
                           .seq_stride = stride,
                           .k_cache = kc.as<float>(),
                           .v_cache = vc.as<float>()});
      std::vector<float> rk(seqs * stride, 0.f), rv(seqs * stride, 0.f);
      for (int64_t t = 0; t < n; ++t) {
        float* qt = q.data() + t * qd;
        float* kt = k.data() + t * kvd;
        if (norm) {
          for (int64_t h = 0; h < heads; ++h)
            cpu::k_scalar_kernels.rmsnorm(qt + h * hd, qn.data(), 1e-6f, hd, qt + h * hd);
          for (int64_t h = 0; h < kvh; ++h)
            cpu::k_scalar_kernels.rmsnorm(kt + h * hd, kn.data(), 1e-6f, hd, kt + h * hd);
        }
        rope.apply(qt, heads, pos[t]);
        rope.apply(kt, kvh, pos[t]);
        std::copy_n(kt, kvd, rk.data() + seq[t] * stride + pos[t] * kvd);
        std::copy_n(v.data() + t * kvd, kvd, rv.data() + seq[t] * stride + pos[t] * kvd);
      }
      const std::string what = fmt::format("qk_rope_store norm {} interleaved {}", norm, interleaved);
      err += close(down(dq, q.size()), q, 1e-5f, what + " q");
      err += close(down(kc, rk.size()), rk, 1e-5f, what + " k cache");
      err += close(down(vc, rv.size()), rv, 0.f, what + " v cache");
    }
  return err;
}

// Per-token kernel at per-token positions of two sequences vs one ops::attention per token.
std::string check_attention_seq() {
  ThreadPool pool(2, false);
  const int64_t heads = 4, kvh = 2, hd = 64, cap = 40, qd = heads * hd, kvd = kvh * hd;
  const std::vector<int32_t> pos = {0, 39, 7, 12}, seq = {1, 0, 1, 0};
  const int64_t n = static_cast<int64_t>(pos.size());
  auto q = randv(n * qd, 1), kc = randv(2 * cap * kvd, 2), vc = randv(2 * cap * kvd, 3);
  DeviceBuffer dq = up(q), dk = up(kc), dv = up(vc), dpos = up(pos), dseq = up(seq),
               dout(n * qd * 4);
  const float scale = 0.125f;
  cuda::attention({.q = dq.as<float>(),
                   .n_tokens = n,
                   .pos0 = 0,
                   .k_cache = dk.as<float>(),
                   .v_cache = dv.as<float>(),
                   .n_heads = heads,
                   .n_kv_heads = kvh,
                   .head_dim = hd,
                   .scale = scale,
                   .out = dout.as<float>(),
                   .kernel = cuda::AttentionKernel::PER_TOKEN,
                   .pos = dpos.as<int32_t>(),
                   .seq = dseq.as<int32_t>(),
                   .seq_stride = cap * kvd});
  std::vector<float> ref(n * qd);
  for (int64_t t = 0; t < n; ++t) {
    ops::AttentionArgs a{.q = q.data() + t * qd,
                         .n_tokens = 1,
                         .pos0 = pos[t],
                         .k_cache = kc.data() + seq[t] * cap * kvd,
                         .v_cache = vc.data() + seq[t] * cap * kvd,
                         .n_heads = heads,
                         .n_kv_heads = kvh,
                         .head_dim = hd,
                         .scale = scale,
                         .out = ref.data() + t * qd};
    ops::attention(pool, a);
  }
  return close(down(dout, ref.size()), ref, 2e-5f, "attention per-token positions");
}

// MoE decode with skipped (-1) ids and accumulation vs CpuExperts with those weights zeroed.
std::string check_moe_skip() {
  ThreadPool pool(2, false);
  cuda::Blas blas(8, 256);
  const int64_t E = 6, H = 64, I = 32, k = 3, n = 3;
  std::vector<Bf16> g, u, d;
  ModelWeights mw;
  mw.layers.resize(1);
  for (int64_t e = 0; e < E; ++e) {
    g.push_back(bf16_rand(I * H, 100 * e, 0.2f));
    u.push_back(bf16_rand(I * H, 100 * e + 1, 0.2f));
    d.push_back(bf16_rand(H * I, 100 * e + 2, 0.2f));
  }
  std::vector<uint16_t> sg, su, sd;
  for (int64_t e = 0; e < E; ++e) {
    mw.layers[0].experts.push_back({view(DType::BF16, I, H, g[e].bits.data()),
                                    view(DType::BF16, I, H, u[e].bits.data()),
                                    view(DType::BF16, H, I, d[e].bits.data())});
    sg.insert(sg.end(), g[e].bits.begin(), g[e].bits.end());
    su.insert(su.end(), u[e].bits.begin(), u[e].bits.end());
    sd.insert(sd.end(), d[e].bits.begin(), d[e].bits.end());
  }
  DeviceBuffer dg = up(sg), du = up(su), dd = up(sd);
  const cuda::DeviceExperts de{.gate = dg.data(), .up = du.data(), .down = dd.data(),
                               .dtype = DType::BF16, .n_experts = E, .hidden = H, .inter = I};
  const std::vector<int32_t> ids = {0, -1, 5, 2, 3, -1, -1, 4, 1};
  const std::vector<float> w = {0.5f, 0.3f, 0.2f, 0.6f, 0.4f, 0.1f, 0.7f, 0.2f, 0.1f};
  auto x = randv(n * H, 9), out0 = randv(n * H, 10);
  DeviceBuffer dx = up(x), dids = up(ids), dw = up(w), dout = up(out0);
  cuda::MoeWorkspace ws(4, k, E, H, I);
  cuda::moe_experts(blas, de,
                    {.x = dx.as<float>(), .n = n, .ids = dids.as<int32_t>(),
                     .weights = dw.as<float>(), .top_k = k, .out = dout.as<float>(),
                     .accumulate = true},
                    ws);
  std::vector<int32_t> rids = ids;
  std::vector<float> rw = w, ref(n * H);
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0) rids[i] = 0, rw[i] = 0.f;
  CpuExperts cpu(mw, H, I, pool);
  cpu.apply({.layer = 0, .x = x.data(), .n_tokens = n, .ids = rids.data(), .weights = rw.data(),
             .top_k = k, .out = ref.data()});
  for (size_t i = 0; i < ref.size(); ++i) ref[i] += out0[i];
  return close(down(dout, ref.size()), ref, 1e-4f, "moe decode skip+accumulate");
}

// The device bookkeeping makes ExpertCache's decisions: same slot per id, same fetch list in
// the same order, same counters, over random steps (repeats, all-hit and all-miss layers).
// 8 experts a layer, up to 8 ids a step: decode-sized steps, on probation where they cycle; 48
// a layer, up to 64 ids: steps past k_probation_max_active distinct experts too.
std::string check_slot_cache() {
  std::string err;
  struct Config {
    int64_t E, slots, max_count;
  };
  for (const Config cfg : {Config{8, 8, 8}, Config{8, 11, 8}, Config{8, 24, 8}, Config{48, 48, 64},
                           Config{48, 72, 64}}) {
    const int64_t L = 3, E = cfg.E, slots = cfg.slots;
    ExpertCache host(L, E, slots);
    DeviceBuffer slot_for_id(L * E * 4), id_of_slot(slots * 4), usage(slots * 8),
        recency(L * E * 8), counters(cuda::k_slot_counters * 8), fetch(256 * 4),
        fetch_slot(256 * 4), n_fetch(4), dslots(64 * 4);
    cuda::memset_async(recency.data(), 0, recency.bytes());
    cuda::memset_async(counters.data(), 0, counters.bytes());
    const cuda::SlotCacheState st{.slot_for_id = slot_for_id.as<int32_t>(),
                                  .id_of_slot = id_of_slot.as<int32_t>(),
                                  .usage = usage.as<int64_t>(),
                                  .recency = recency.as<int64_t>(),
                                  .counters = counters.as<int64_t>(),
                                  .n_experts = E,
                                  .slots = slots,
                                  .window = L};
    cuda::slot_cache_reset(st, L * E);
    std::mt19937 rng(static_cast<uint32_t>(slots));
    for (int step = 0; step < 400; ++step) {
      if (step == 60) {  // prefill streaming drops its buffers' slots [0, E)
        host.drop_slots(E);
        cuda::slot_cache_drop(st, L * E, E);
      }
      if (step == 120) {  // a reset midway (a resize does this)
        host.reset();
        cuda::slot_cache_reset(st, L * E);
      }
      const int64_t layer = rng() % L, count = 1 + rng() % cfg.max_count;
      std::vector<int32_t> ids(count);
      for (auto& id : ids) id = static_cast<int32_t>(rng() % (step % 3 == 0 ? 3 : E));
      DeviceBuffer dids = up(ids);
      cuda::slot_cache_ensure({.s = st,
                               .layer = layer,
                               .ids = dids.as<int32_t>(),
                               .count = count,
                               .slot_ids = dslots.as<int32_t>(),
                               .fetch = fetch.as<int32_t>(),
                               .fetch_slot = fetch_slot.as<int32_t>(),
                               .n_fetch = n_fetch.as<int32_t>()});
      std::vector<int32_t> distinct;
      for (int32_t id : ids)
        if (std::find(distinct.begin(), distinct.end(), id) == distinct.end())
          distinct.push_back(id);
      const EnsurePlan plan = host.ensure(layer, distinct);
      const auto got_slots = down<int32_t>(dslots, count);
      const int32_t nf = down<int32_t>(n_fetch, 1)[0];
      const auto got_fetch = down<int32_t>(fetch, std::max(nf, 1));
      const auto got_fslot = down<int32_t>(fetch_slot, std::max(nf, 1));
      std::string e;
      for (int64_t i = 0; i < count; ++i) {
        const size_t di = std::find(distinct.begin(), distinct.end(), ids[i]) - distinct.begin();
        if (got_slots[i] != plan.slot_of[di])
          e += fmt::format("id {} slot {} != host {}; ", ids[i], got_slots[i], plan.slot_of[di]);
      }
      if (nf != static_cast<int32_t>(plan.fetch.size()))
        e += fmt::format("{} fetches != host {}; ", nf, plan.fetch.size());
      else
        for (int32_t f = 0; f < nf; ++f)
          if (got_fetch[f] != plan.fetch[f] || got_fslot[f] != plan.fetch_slot[f])
            e += fmt::format("fetch {}: {}->{} != host {}->{}; ", f, got_fetch[f], got_fslot[f],
                             plan.fetch[f], plan.fetch_slot[f]);
      if (!e.empty()) return err + fmt::format("slot cache {} slots step {}: {}\n", slots, step, e);
    }
    const auto c = down<int64_t>(counters, cuda::k_slot_counters);
    const ExpertCacheStats& hs = host.stats();
    if (c[cuda::SC_LOOKUPS] != hs.lookups || c[cuda::SC_HITS] != hs.hits ||
        c[cuda::SC_MISSES] != hs.misses || c[cuda::SC_EVICTIONS] != hs.evictions ||
        c[cuda::SC_PROBATION] != hs.probation)
      err += fmt::format("slot cache {} slots: counters {}/{}/{}/{}/{} != host {}/{}/{}/{}/{}\n",
                         slots, c[cuda::SC_LOOKUPS], c[cuda::SC_HITS], c[cuda::SC_MISSES],
                         c[cuda::SC_EVICTIONS], c[cuda::SC_PROBATION], hs.lookups, hs.hits,
                         hs.misses, hs.evictions, hs.probation);
    // 3 layers of up to 8 ids in 8 or 11 slots cycle: the probation path must have run.
    if (E == 8 && slots < L * 8 && hs.probation == 0)
      err += fmt::format("slot cache {} slots: nothing went on probation\n", slots);
  }
  return err;
}

// The fetch kernel copies exactly the listed experts' matrices into their slots (16-byte and
// byte paths), from mapped pinned memory.
std::string check_fetch() {
  std::string err;
  for (size_t mb : {size_t{4096 + 16}, size_t{100}}) {
    const int64_t E = 5, S = 4;
    cuda::PinnedBuffer host(3 * E * mb);
    auto* h = static_cast<unsigned char*>(host.data());
    for (size_t i = 0; i < 3 * E * mb; ++i) h[i] = static_cast<unsigned char>((i * 131 + 7) >> 3);
    DeviceBuffer gate(S * mb), upb(S * mb), dn(S * mb);
    for (auto* b : {&gate, &upb, &dn}) cuda::memset_async(b->data(), 0, b->bytes());
    const std::vector<int32_t> f = {3, 0, 4}, fs = {2, 0, 3};
    const std::vector<int32_t> nf = {3};
    DeviceBuffer df = up(f), dfs = up(fs), dnf = up(nf);
    const char* src = static_cast<const char*>(host.device_data());
    cuda::fetch_experts({.gate_src = src,
                         .up_src = src + E * mb,
                         .down_src = src + 2 * E * mb,
                         .gate_dst = gate.as<char>(),
                         .up_dst = upb.as<char>(),
                         .down_dst = dn.as<char>(),
                         .matrix_bytes = mb,
                         .fetch = df.as<int32_t>(),
                         .fetch_slot = dfs.as<int32_t>(),
                         .n_fetch = dnf.as<int32_t>()});
    int m = 0;
    for (const DeviceBuffer* b : {&gate, &upb, &dn}) {
      const auto got = down<unsigned char>(*b, S * mb);
      for (int64_t s = 0; s < S; ++s) {
        const auto it = std::find(fs.begin(), fs.end(), s);
        for (size_t i = 0; i < mb; ++i) {
          const unsigned char want =
              it == fs.end() ? 0 : h[(m * E + f[it - fs.begin()]) * mb + i];
          if (got[s * mb + i] != want) {
            err += fmt::format("fetch {} bytes: matrix {} slot {} byte {}: {} != {}\n", mb, m, s,
                               i, got[s * mb + i], want);
            s = S;
            break;
          }
        }
      }
      ++m;
    }
  }
  return err;
}
}  // namespace

std::vector<Check> runtime_checks() {
  return {{"gemv_multi", check_gemv_multi},     {"qk_rope_store", check_qk_rope},
          {"attention_seq", check_attention_seq}, {"moe_skip", check_moe_skip},
          {"slot_cache", check_slot_cache},     {"fetch_experts", check_fetch}};
}

}  // namespace ft::cuda_checks
