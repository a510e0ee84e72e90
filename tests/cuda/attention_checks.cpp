// BF16 KV cache attention vs the CPU: the flash prefill kernel (GQA 1/4/8, head dims 32-256,
// lengths to 5000, prefix offsets, window and sinks), flash-decoding over several sequences
// (split and not, re-launched and graph-replayed at new lengths; the kernel per q head and the
// tensor-core kernel per kv head), the bf16 cache store of
// qk_rope_store, and HostExperts::copy_of's progress callback. Plus the flash timing.
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <thread>

#include "backend/cpu/thread_pool.h"
#include "base/half.h"
#include "cuda_checks.h"
#include "experts/gpu_expert_store.h"
#include "model/model.h"
#include "ops/ops.h"

namespace ft::cuda_checks {

namespace {
using cuda::DeviceBuffer;

std::vector<float> round_bf16(std::vector<float> v) {
  for (auto& x : v) x = bf16_to_f32(f32_to_bf16(x));
  return v;
}
std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> o(v.size());
  for (size_t i = 0; i < v.size(); ++i) o[i] = f32_to_bf16(v[i]);
  return o;
}

int pool_threads() { return static_cast<int>(std::max(2u, std::thread::hardware_concurrency())); }

struct Shape {
  int64_t heads, kv_heads, hd, n, pos0, window = 0;
  bool sinks = false;
};

// The CPU op (ops::attention) where it applies; with a window or sinks a scalar reference in
// double (keys pos - window < key <= pos; a sink adds exp(sink - max) to the denominator).
void reference(ThreadPool& pool, const Shape& s, const float* q, const float* kc, const float* vc,
               const float* sinks, float* out) {
  const float scale = 1.f / std::sqrt(static_cast<float>(s.hd));
  if (s.window == 0 && !s.sinks) {
    ops::attention(pool, {.q = q,
                          .n_tokens = s.n,
                          .pos0 = s.pos0,
                          .k_cache = kc,
                          .v_cache = vc,
                          .n_heads = s.heads,
                          .n_kv_heads = s.kv_heads,
                          .head_dim = s.hd,
                          .scale = scale,
                          .out = out});
    return;
  }
  const int64_t G = s.heads / s.kv_heads, kvd = s.kv_heads * s.hd, qd = s.heads * s.hd;
  pool.run(s.n * s.heads, 1, [&](int64_t b0, int64_t b1) {
    std::vector<double> sc;
    for (int64_t task = b0; task < b1; ++task) {
      const int64_t t = task / s.heads, h = task % s.heads, g = h / G, pos = s.pos0 + t;
      const int64_t lo = s.window > 0 ? std::max<int64_t>(0, pos - s.window + 1) : 0;
      sc.assign(pos + 1, 0.0);
      double mx = s.sinks ? sinks[h] : -INFINITY;
      for (int64_t j = lo; j <= pos; ++j) {
        double d = 0;
        for (int64_t e = 0; e < s.hd; ++e)
          d += double(q[t * qd + h * s.hd + e]) * kc[j * kvd + g * s.hd + e];
        sc[j] = d * scale;
        mx = std::max(mx, sc[j]);
      }
      double sum = s.sinks ? std::exp(sinks[h] - mx) : 0.0;
      for (int64_t j = lo; j <= pos; ++j) sum += (sc[j] = std::exp(sc[j] - mx));
      for (int64_t e = 0; e < s.hd; ++e) {
        double o = 0;
        for (int64_t j = lo; j <= pos; ++j) o += sc[j] * vc[j * kvd + g * s.hd + e];
        out[t * qd + h * s.hd + e] = static_cast<float>(o / sum);
      }
    }
  });
}

// |got - ref| <= rel * max|ref| of the (token, head) row + abs, over every row.
std::string rows_close(const std::vector<float>& got, const std::vector<float>& ref, int64_t hd,
                       float rel, float abs, const std::string& what) {
  float worst = 0;  // max |d| / bound
  size_t at = 0;
  for (size_t r = 0; r * hd < ref.size(); ++r) {
    float mx = 0;
    for (int64_t e = 0; e < hd; ++e) mx = std::max(mx, std::fabs(ref[r * hd + e]));
    for (int64_t e = 0; e < hd; ++e) {
      const size_t i = r * hd + e;
      const float d = std::fabs(got[i] - ref[i]) / (rel * mx + abs);
      if (!(d <= worst)) worst = d, at = i;
    }
  }
  if (worst <= 1.f) return "";
  return fmt::format("{}: |d| {:.3g}x the bound at {} (got {}, ref {})\n", what, worst, at, got[at],
                     ref[at]);
}

// The flash prefill kernel (or the decode kernel for head dims it lacks) on bf16 caches vs the
// CPU on the same bf16 k/v (q and p enter the MMAs as bf16 hi + lo: f32-like, 2e-3 of a row's
// range allowed).
std::string check_flash(const Shape& s, uint32_t seed) {
  ThreadPool pool(pool_threads(), false);
  const int64_t len = s.pos0 + s.n, kvd = s.kv_heads * s.hd;
  const auto q = randv(s.n * s.heads * s.hd, seed);
  const auto kc = round_bf16(randv(len * kvd, seed + 1, 1.5f));
  const auto vc = round_bf16(randv(len * kvd, seed + 2));
  const auto sinks = randv(s.heads, seed + 3, 2.f);
  std::vector<float> ref(q.size());
  reference(pool, s, q.data(), kc.data(), vc.data(), sinks.data(), ref.data());
  DeviceBuffer dq = up(q), dk = up(to_bf16(kc)), dv = up(to_bf16(vc)), ds = up(sinks),
               dout(q.size() * sizeof(float));
  cuda::attention({.q = dq.as<float>(),
                   .n_tokens = s.n,
                   .pos0 = s.pos0,
                   .k_cache = dk.data(),
                   .v_cache = dv.data(),
                   .n_heads = s.heads,
                   .n_kv_heads = s.kv_heads,
                   .head_dim = s.hd,
                   .scale = 1.f / std::sqrt(static_cast<float>(s.hd)),
                   .out = dout.as<float>(),
                   .kv_dtype = DType::BF16,
                   .sinks = s.sinks ? ds.as<float>() : nullptr,
                   .window = s.window});
  return rows_close(down(dout, q.size()), ref, s.hd, 2e-3f, 2e-5f,
                    fmt::format("flash heads {}/{} hd {} n {} pos0 {} window {} sinks {}", s.heads,
                                s.kv_heads, s.hd, s.n, s.pos0, s.window, s.sinks));
}

std::string check_flash_all() {
  const Shape shapes[] = {{8, 8, 64, 1, 0},
                          {8, 8, 64, 7, 100},
                          {8, 2, 128, 130, 0},
                          {8, 2, 128, 64, 4000},
                          {16, 2, 128, 1000, 0},
                          {16, 2, 128, 700, 4300},
                          {8, 1, 256, 100, 50},
                          {4, 4, 32, 33, 5},
                          {8, 2, 96, 40, 10},
                          {32, 4, 128, 257, 1024},
                          {8, 2, 64, 300, 100, 64, true},
                          {8, 2, 128, 200, 0, 0, true},
                          {8, 4, 128, 150, 900, 128},
                          {4, 1, 256, 77, 3},
                          {12, 4, 64, 513, 0}};
  std::string err;
  uint32_t seed = 100;
  for (const Shape& s : shapes) err += check_flash(s, seed += 7);
  return err;
}

// Flash-decoding: one token each of three sequences (lengths 1, 700, 5000 in a cache of 5120
// positions, per-token pos/seq), split (at most 4 chunks of k_attention_split_keys keys, longer
// past 4 of them) and not, launched twice (the counters reset), then captured in a graph and
// replayed at other lengths.
// `heads` q heads over 2 kv heads (16: groups of 8, the GQA kernel's packed hi / lo rows; 24:
// groups of 12, the two MMAs apart).
std::string check_decode(bool window_sinks, bool gqa, int64_t heads = 16) {
  ThreadPool pool(pool_threads(), false);
  cuda::set_attention_gqa(gqa);  // the tensor-core kernel per kv head, or a block per q head
  const int64_t kv_heads = 2, hd = 128, cap = 5120, kvd = kv_heads * hd, S = 3;
  const int64_t window = window_sinks ? 600 : 0;
  const auto kc = round_bf16(randv(S * cap * kvd, 11, 1.5f));
  const auto vc = round_bf16(randv(S * cap * kvd, 12));
  const auto q = randv(S * heads * hd, 13);
  const auto sinks = randv(heads, 14, 2.f);
  DeviceBuffer dk = up(to_bf16(kc)), dv = up(to_bf16(vc)), dq = up(q), ds = up(sinks),
               dout(q.size() * sizeof(float));
  const int64_t max_splits = 4;  // chunks grow past 4 * k_attention_split_keys keys
  DeviceBuffer part(cuda::attention_split_floats(S, heads, hd, max_splits) * sizeof(float));
  DeviceBuffer counters = up(std::vector<uint32_t>(S * heads, 0));
  const std::vector<int32_t> seq = {2, 0, 1};
  DeviceBuffer dseq = up(seq), dpos(S * sizeof(int32_t));
  auto expected = [&](const std::vector<int32_t>& pos) {
    std::vector<float> ref(q.size());
    for (int64_t t = 0; t < S; ++t) {
      const Shape s{heads, kv_heads, hd, 1, pos[t], window, window_sinks};
      reference(pool, s, q.data() + t * heads * hd, kc.data() + seq[t] * cap * kvd,
                vc.data() + seq[t] * cap * kvd, sinks.data(), ref.data() + t * heads * hd);
    }
    return ref;
  };
  auto args = [&](bool split) {
    return cuda::AttentionArgs{
        .q = dq.as<float>(),
        .n_tokens = S,
        .pos0 = 0,
        .k_cache = dk.data(),
        .v_cache = dv.data(),
        .n_heads = heads,
        .n_kv_heads = kv_heads,
        .head_dim = hd,
        .scale = 1.f / std::sqrt(static_cast<float>(hd)),
        .out = dout.as<float>(),
        .kernel = cuda::AttentionKernel::PER_TOKEN,
        .pos = dpos.as<int32_t>(),
        .seq = dseq.as<int32_t>(),
        .seq_stride = cap * kvd,
        .kv_dtype = DType::BF16,
        .split = split ? cuda::AttentionSplit{.partial = part.as<float>(),
                                              .counters = counters.as<uint32_t>(),
                                              .max_splits = max_splits}
                       : cuda::AttentionSplit{},
        .sinks = window_sinks ? ds.as<float>() : nullptr,
        .window = window};
  };
  std::string err;
  const std::string tag =
      fmt::format("{} decode {} heads{}", gqa ? "gqa" : "per-head", heads,
                  window_sinks ? " (window, sinks)" : "");
  std::vector<int32_t> pos = {0, 699, 4999};
  dpos.upload(pos.data(), pos.size() * sizeof(int32_t));
  const auto ref = expected(pos);
  for (bool split : {false, true})
    for (int rep = 0; rep < 2; ++rep) {
      cuda::attention(args(split));
      err += rows_close(down(dout, q.size()), ref, hd, 1e-4f, 1e-5f,
                        fmt::format("{} split {} launch {}", tag, split, rep));
    }
  for (uint32_t c : down<uint32_t>(counters, S * heads))
    if (c != 0) return err + tag + ": split counters not reset\n";
  // Captured once, replayed at new lengths (the grid covers any length up to the capacity).
  cuda::Stream stream;
  cuda::StreamScope scope(stream);
  cuda::Graph graph;
  graph.capture_begin();
  cuda::attention(args(true));
  graph.capture_end();
  for (const std::vector<int32_t>& p :
       {std::vector<int32_t>{5119, 1, 512}, std::vector<int32_t>{1023, 2048, 0}}) {
    dpos.upload(p.data(), p.size() * sizeof(int32_t));
    graph.launch();
    cuda::stream_synchronize();
    err += rows_close(down(dout, q.size()), expected(p), hd, 1e-4f, 1e-5f,
                      fmt::format("{} graph replay at {} {} {}", tag, p[0], p[1], p[2]));
  }
  return err;
}

// check_decode, then the default kernel choice back.
std::string decode_with(bool window_sinks, bool gqa, int64_t heads = 16) {
  std::string err = check_decode(window_sinks, gqa, heads);
  cuda::set_attention_gqa(true);
  return err;
}

// The GQA kernel's unpacked hi / lo MMAs: groups of 8 with packing off, and groups of 12.
std::string decode_gqa_unpacked() {
  cuda::set_attention_gqa_pack(false);
  std::string err = decode_with(false, true) + decode_with(true, true);
  cuda::set_attention_gqa_pack(true);
  return err + decode_with(false, true, 24) + decode_with(true, true, 24);
}

// qk_rope_store into bf16 caches == the f32 store rounded to bf16.
std::string check_store_bf16() {
  const int64_t n = 5, heads = 4, kv_heads = 2, hd = 64, cap = 16, kvd = kv_heads * hd;
  const auto q = randv(n * heads * hd, 21), k = randv(n * kvd, 22), v = randv(n * kvd, 23);
  std::vector<float> cs(cap * hd / 2), sn(cap * hd / 2);
  for (size_t i = 0; i < cs.size(); ++i) cs[i] = std::cos(0.1f * i), sn[i] = std::sin(0.1f * i);
  const std::vector<int32_t> pos = {3, 4, 5, 0, 9}, seq = {0, 0, 0, 1, 1};
  DeviceBuffer dcs = up(cs), dsn = up(sn), dpos = up(pos), dseq = up(seq);
  std::vector<float> ref_k, ref_v;
  std::vector<uint16_t> got_k, got_v;
  for (DType dt : {DType::F32, DType::BF16}) {
    const size_t es = dt == DType::BF16 ? 2 : 4;
    DeviceBuffer dq = up(q), dk = up(k), dv = up(v), kc(2 * cap * kvd * es), vc(2 * cap * kvd * es);
    cuda::memset_async(kc.data(), 0, kc.bytes());
    cuda::memset_async(vc.data(), 0, vc.bytes());
    cuda::qk_rope_store({.q = dq.as<float>(),
                         .k = dk.as<float>(),
                         .v = dv.as<float>(),
                         .n = n,
                         .n_heads = heads,
                         .n_kv_heads = kv_heads,
                         .head_dim = hd,
                         .rot_dim = hd,
                         .interleaved = false,
                         .cos = dcs.as<float>(),
                         .sin = dsn.as<float>(),
                         .q_norm = nullptr,
                         .k_norm = nullptr,
                         .eps = 1e-6f,
                         .pos = dpos.as<int32_t>(),
                         .seq = dseq.as<int32_t>(),
                         .seq_stride = cap * kvd,
                         .k_cache = kc.data(),
                         .v_cache = vc.data(),
                         .kv_dtype = dt});
    if (dt == DType::F32) {
      ref_k = down(kc, 2 * cap * kvd), ref_v = down(vc, 2 * cap * kvd);
    } else {
      got_k = down<uint16_t>(kc, 2 * cap * kvd), got_v = down<uint16_t>(vc, 2 * cap * kvd);
    }
  }
  for (size_t i = 0; i < ref_k.size(); ++i)
    if (got_k[i] != f32_to_bf16(ref_k[i]) || got_v[i] != f32_to_bf16(ref_v[i]))
      return fmt::format("qk_rope_store bf16: element {} is {:#x}/{:#x}, want {:#x}/{:#x}\n", i,
                         got_k[i], got_v[i], f32_to_bf16(ref_k[i]), f32_to_bf16(ref_v[i]));
  return "";
}

// HostExperts::copy_of reports monotone progress ending at total_bytes().
std::string check_copy_progress() {
  auto model = Model::synthetic(synthetic_moe_config({.layers = 3,
                                                      .experts = 8,
                                                      .top_k = 2,
                                                      .hidden = 64,
                                                      .expert_dim = 32,
                                                      .heads = 4,
                                                      .kv_heads = 2,
                                                      .head_dim = 16,
                                                      .vocab = 64}),
                                5);
  std::vector<std::pair<size_t, size_t>> calls;
  const HostExperts h = HostExperts::copy_of(*model, [&](size_t done, size_t total) {
    calls.push_back({done, total});
  });
  if (calls.empty()) return "copy_of: no progress reported\n";
  for (size_t i = 0; i < calls.size(); ++i) {
    if (calls[i].second != h.total_bytes())
      return fmt::format("copy_of: total {} != {}\n", calls[i].second, h.total_bytes());
    if (i > 0 && calls[i].first < calls[i - 1].first) return "copy_of: progress went back\n";
  }
  if (calls.back().first != h.total_bytes())
    return fmt::format("copy_of: ended at {} of {}\n", calls.back().first, h.total_bytes());
  return "";
}
}  // namespace

std::vector<Check> attention_checks() {
  std::vector<Check> checks = {
      {"attention/flash_bf16", check_flash_all},
      {"attention/decode_bf16_split", [] { return decode_with(false, false); }},
      {"attention/decode_bf16_window_sinks", [] { return decode_with(true, false); }},
      {"attention/decode_gqa_split", [] { return decode_with(false, true); }},
      {"attention/decode_gqa_window_sinks", [] { return decode_with(true, true); }},
      {"attention/decode_gqa_unpacked", decode_gqa_unpacked},
      {"attention/qk_rope_store_bf16", check_store_bf16},
      // A consumer GPU's 99 KiB a block: flash prefill with half-length tiles at head_dim
      // 128 / 256, GQA decode (head_dim 128) in 4-warp blocks.
      {"attention/consumer_smem",
       [] {
         cuda::set_smem_limit(99 * 1024);
         std::string err = check_flash_all();
         err += decode_with(false, true);
         err += decode_with(true, true);
         cuda::set_smem_limit(0);
         return err;
       }},
      {"host_experts/copy_progress", check_copy_progress}};
  for (Check& c : rope_decode_checks()) checks.push_back(std::move(c));
  return checks;
}

std::string flash_attention_benchmark() {
  // Qwen3-30B-A3B's attention: 32 q heads, 4 KV heads, head_dim 128; a 4096-token chunk at
  // the start and at the end of a 16k prompt.
  const int64_t heads = 32, kv_heads = 4, hd = 128, n = 4096, len = 16384, kvd = kv_heads * hd;
  DeviceBuffer dq = up(randv(n * heads * hd, 1)), dout(n * heads * hd * sizeof(float));
  DeviceBuffer kf = up(randv(len * kvd, 2)), vf = up(randv(len * kvd, 3));
  DeviceBuffer kb = up(to_bf16(randv(len * kvd, 2))), vb = up(to_bf16(randv(len * kvd, 3)));
  std::string out;
  auto time = [&](const cuda::AttentionArgs& a) {
    cuda::attention(a);
    cuda::synchronize();
    const int reps = 3;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) cuda::attention(a);
    cuda::synchronize();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
               .count() /
           reps;
  };
  for (int64_t pos0 : {int64_t{0}, len - n})
    for (DType dt : {DType::F32, DType::BF16}) {
      const bool bf = dt == DType::BF16;
      const double ms = time({.q = dq.as<float>(),
                              .n_tokens = n,
                              .pos0 = pos0,
                              .k_cache = bf ? kb.data() : kf.data(),
                              .v_cache = bf ? vb.data() : vf.data(),
                              .n_heads = heads,
                              .n_kv_heads = kv_heads,
                              .head_dim = hd,
                              .scale = 0.088f,
                              .out = dout.as<float>(),
                              .kv_dtype = dt});
      const double pairs = double(n) * pos0 + n * (n + 1) / 2.0;
      out += fmt::format(
          "attention prefill {} n {} pos0 {} heads {}/{} hd {}: {:.3f} ms, {:.1f} TFLOP/s\n",
          bf ? "flash bf16 KV (mma.sync)" : "tensor f32 KV (TF32 x3)", n, pos0, heads, kv_heads, hd,
          ms, 4.0 * hd * heads * pairs / (ms * 1e-3) / 1e12);
    }
  return out;
}

}  // namespace ft::cuda_checks
