// The decode attention kernel with qk_rope_store fused (AttentionArgs::rope) vs the two launches
// it replaces (qk_rope_store, then the same decode kernel unfused): f32 and bf16 caches, per-head
// q/k norm or none, full / partial / interleaved rotation, split or not, window and sinks, tokens
// of several sequences and runs of one sequence's tokens (across chunk boundaries), launched and
// graph-replayed at new positions. The caches must match bit for bit and the outputs to 1e-6.
#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <tuple>

#include "base/half.h"
#include "cuda_checks.h"

namespace ft::cuda_checks {

namespace {
using cuda::DeviceBuffer;

struct Config {
  DType dt;
  int64_t hd, rot;
  bool interleaved, norm, split, sinks;
  int64_t window;
};

// (sequence, position) of each token of a pass; a sequence's tokens consecutive.
using Layout = std::vector<std::pair<int32_t, int32_t>>;

constexpr int64_t k_heads = 8, k_kv_heads = 2, k_seqs = 3, k_cap = 1200, k_max_splits = 4;

struct Rig {
  Config c;
  int64_t kvd, qd, es;
  std::vector<float> q, k, v, qn, kn, sinks, cs, sn;
  std::vector<char> cache0_k, cache0_v;  // the caches before a pass (element bytes)
  DeviceBuffer dcs, dsn, dqn, dkn, dsinks;

  explicit Rig(const Config& cfg, uint32_t seed) : c(cfg) {
    kvd = k_kv_heads * c.hd, qd = k_heads * c.hd, es = c.dt == DType::BF16 ? 2 : 4;
    const int64_t T = cuda::k_gemv_max_tokens;
    q = randv(T * qd, seed), k = randv(T * kvd, seed + 1, 1.5f), v = randv(T * kvd, seed + 2);
    qn = randv(c.hd, seed + 3, 0.3f), kn = randv(c.hd, seed + 4, 0.3f);
    for (auto& w : qn) w += 1.f;
    for (auto& w : kn) w += 1.f;
    sinks = randv(k_heads, seed + 5, 2.f);
    const int64_t half = c.rot / 2;
    cs.resize(k_cap * half), sn.resize(k_cap * half);
    for (int64_t p = 0; p < k_cap; ++p)
      for (int64_t i = 0; i < half; ++i) {
        const double a = p * std::pow(10000.0, -2.0 * i / c.rot);
        cs[p * half + i] = static_cast<float>(std::cos(a));
        sn[p * half + i] = static_cast<float>(std::sin(a));
      }
    const auto hk = randv(k_seqs * k_cap * kvd, seed + 6, 1.5f);
    const auto hv = randv(k_seqs * k_cap * kvd, seed + 7);
    cache0_k = bytes(hk), cache0_v = bytes(hv);
    dcs = up(cs), dsn = up(sn), dqn = up(qn), dkn = up(kn), dsinks = up(sinks);
  }

  std::vector<char> bytes(const std::vector<float>& x) const {
    std::vector<char> b(x.size() * es);
    for (size_t i = 0; i < x.size(); ++i) {
      if (es == 2) {
        const uint16_t h = f32_to_bf16(x[i]);
        std::memcpy(b.data() + 2 * i, &h, 2);
      } else {
        std::memcpy(b.data() + 4 * i, &x[i], 4);
      }
    }
    return b;
  }
};

// One pass's buffers: raw projections, caches, split workspace, output.
struct Pass {
  DeviceBuffer q, k, v, kc, vc, pos, seq, part, counters, out;
  int64_t n;
  Pass(const Rig& r, int64_t n_tokens) : n(n_tokens) {
    q = up(r.q), k = up(r.k), v = up(r.v);
    kc = up(r.cache0_k), vc = up(r.cache0_v);
    pos = DeviceBuffer(cuda::k_gemv_max_tokens * sizeof(int32_t));
    seq = DeviceBuffer(cuda::k_gemv_max_tokens * sizeof(int32_t));
    part = DeviceBuffer(
        cuda::attention_split_floats(cuda::k_gemv_max_tokens, k_heads, r.c.hd, k_max_splits) *
        sizeof(float));
    counters = up(std::vector<uint32_t>(cuda::k_gemv_max_tokens * k_heads, 0));
    out = DeviceBuffer(cuda::k_gemv_max_tokens * r.qd * sizeof(float));
  }
  // Fresh projections and caches, this layout's positions.
  void reset(const Rig& r, const Layout& l) {
    q.upload(r.q.data(), r.q.size() * 4), k.upload(r.k.data(), r.k.size() * 4);
    kc.upload(r.cache0_k.data(), r.cache0_k.size());
    vc.upload(r.cache0_v.data(), r.cache0_v.size());
    std::vector<int32_t> p, s;
    for (auto [sq, ps] : l) s.push_back(sq), p.push_back(ps);
    pos.upload(p.data(), p.size() * 4), seq.upload(s.data(), s.size() * 4);
  }
  cuda::QkRopeArgs rope_args(const Rig& r) {
    return {.q = q.as<float>(),
            .k = k.as<float>(),
            .v = v.as<float>(),
            .n = n,
            .n_heads = k_heads,
            .n_kv_heads = k_kv_heads,
            .head_dim = r.c.hd,
            .rot_dim = r.c.rot,
            .interleaved = r.c.interleaved,
            .cos = r.dcs.as<float>(),
            .sin = r.dsn.as<float>(),
            .q_norm = r.c.norm ? r.dqn.as<float>() : nullptr,
            .k_norm = r.c.norm ? r.dkn.as<float>() : nullptr,
            .eps = 1e-6f,
            .pos = pos.as<int32_t>(),
            .seq = seq.as<int32_t>(),
            .seq_stride = k_cap * r.kvd,
            .k_cache = kc.data(),
            .v_cache = vc.data(),
            .kv_dtype = r.c.dt};
  }
  cuda::AttentionArgs attention_args(const Rig& r, bool fused) {
    const cuda::QkRopeArgs ra = rope_args(r);
    return {.q = q.as<float>(),
            .n_tokens = n,
            .pos0 = 0,
            .k_cache = kc.data(),
            .v_cache = vc.data(),
            .n_heads = k_heads,
            .n_kv_heads = k_kv_heads,
            .head_dim = r.c.hd,
            .scale = 1.f / std::sqrt(static_cast<float>(r.c.hd)),
            .out = out.as<float>(),
            .kernel = cuda::AttentionKernel::PER_TOKEN,
            .pos = pos.as<int32_t>(),
            .seq = seq.as<int32_t>(),
            .seq_stride = k_cap * r.kvd,
            .kv_dtype = r.c.dt,
            .split = r.c.split ? cuda::AttentionSplit{.partial = part.as<float>(),
                                                      .counters = counters.as<uint32_t>(),
                                                      .max_splits = k_max_splits}
                               : cuda::AttentionSplit{},
            .sinks = r.c.sinks ? r.dsinks.as<float>() : nullptr,
            .window = r.c.window,
            .rope = fused ? cuda::attention_rope(ra) : cuda::AttentionRope{}};
  }
  // The two launches the fused kernel replaces.
  void unfused(const Rig& r) {
    cuda::qk_rope_store(rope_args(r));
    cuda::attention_decode(attention_args(r, false));
  }
};

// The fused pass's caches and output vs the unfused one's.
std::string compare(const Rig& r, Pass& ref, Pass& got, const std::string& what) {
  const size_t cache_bytes = r.cache0_k.size();
  for (auto [a, b, name] : {std::tuple{&ref.kc, &got.kc, "K"}, std::tuple{&ref.vc, &got.vc, "V"}}) {
    const auto x = down<char>(*a, cache_bytes), y = down<char>(*b, cache_bytes);
    for (size_t i = 0; i < cache_bytes; i += r.es)
      if (std::memcmp(x.data() + i, y.data() + i, r.es) != 0)
        return fmt::format("{}: {} cache element {} (seq {}, pos {}) differs\n", what, name,
                           i / r.es, i / r.es / (k_cap * r.kvd),
                           i / r.es % (k_cap * r.kvd) / r.kvd);
  }
  const auto x = down(ref.out, ref.n * r.qd), y = down(got.out, got.n * r.qd);
  float worst = 0, mx = 0;
  size_t at = 0;
  for (size_t i = 0; i < x.size(); ++i) mx = std::max(mx, std::fabs(x[i]));
  for (size_t i = 0; i < x.size(); ++i) {
    const float d = std::fabs(x[i] - y[i]);
    if (!(d <= worst)) worst = d, at = i;
  }
  if (worst <= 1e-6f * mx) return "";
  return fmt::format("{}: output |d| {:.3g} (max |ref| {:.3g}) at {} (token {}, head {})\n", what,
                     worst, mx, at, at / r.qd, at % r.qd / r.c.hd);
}

std::string describe(const Config& c) {
  return fmt::format("{} hd {} rot {}{} norm {} split {} sinks {} window {}",
                     c.dt == DType::BF16 ? "bf16" : "f32", c.hd, c.rot,
                     c.interleaved ? " interleaved" : "", c.norm, c.split, c.sinks, c.window);
}

std::string layout_name(const Layout& l) {
  std::string s;
  for (auto [sq, p] : l) s += fmt::format("{}{}@{}", s.empty() ? "" : " ", sq, p);
  return s;
}

// Pass layouts at chunk boundaries (128-key chunks, 64 in the GQA kernel at head_dim 256; 4
// chunks at most, so chunks grow past 512 / 256 keys), runs of one sequence crossing them, a
// sequence's first tokens and the last position.
const std::vector<Layout>& layouts() {
  static const std::vector<Layout> l = {{{2, 0}, {0, 127}, {1, 128}},
                                        {{0, 510}, {0, 511}, {0, 512}, {1, 5}},
                                        {{1, 126}, {1, 127}, {1, 128}, {1, 129}},
                                        {{2, 1199}},
                                        {{0, 0}, {0, 1}},
                                        {{1, 255}, {2, 256}, {0, 700}, {0, 701}}};
  return l;
}

std::string check_config(const Config& c, uint32_t seed) {
  const Rig r(c, seed);
  std::string err;
  for (const Layout& l : layouts()) {
    const int64_t n = static_cast<int64_t>(l.size());
    Pass ref(r, n), got(r, n);
    ref.reset(r, l), got.reset(r, l);
    ref.unfused(r);
    cuda::attention(got.attention_args(r, true));
    err += compare(r, ref, got, describe(c) + " pass " + layout_name(l));
    // Launched again on its own caches: the split counters were reset, rows rewritten the same.
    cuda::attention(got.attention_args(r, true));
    err += compare(r, ref, got, describe(c) + " relaunch " + layout_name(l));
  }
  return err;
}

// Captured once at one layout, replayed at others of the same token count.
std::string check_graph(const Config& c, uint32_t seed) {
  const Rig r(c, seed);
  const Layout first = {{2, 3}, {0, 127}, {0, 128}, {1, 900}};
  const std::vector<Layout> replays = {{{1, 126}, {1, 127}, {1, 128}, {1, 129}},
                                       {{0, 1199}, {2, 0}, {2, 1}, {2, 2}},
                                       {{0, 383}, {1, 384}, {2, 511}, {2, 512}}};
  Pass ref(r, 4), got(r, 4);
  got.reset(r, first);
  cuda::Stream stream;
  cuda::StreamScope scope(stream);
  cuda::Graph graph;
  graph.capture_begin();
  cuda::attention(got.attention_args(r, true));
  graph.capture_end();
  std::string err;
  for (const Layout& l : replays) {
    ref.reset(r, l), got.reset(r, l);
    ref.unfused(r);
    graph.launch();
    cuda::stream_synchronize();
    err += compare(r, ref, got, describe(c) + " graph replay " + layout_name(l));
  }
  return err;
}

std::vector<Config> configs() {
  std::vector<Config> out;
  for (DType dt : {DType::F32, DType::BF16})
    for (bool split : {false, true}) {
      out.push_back({dt, 128, 128, false, true, split, false, 0});   // Qwen3: per-head norm
      out.push_back({dt, 128, 128, false, true, split, true, 100});  // window + sinks
      out.push_back({dt, 64, 32, true, false, split, false, 2});     // partial, interleaved
      out.push_back({dt, 256, 256, false, false, split, true, 0});   // no norm, sinks
      out.push_back({dt, 32, 32, false, true, split, false, 0});
    }
  return out;
}

// check(c, seed) under each decode kernel that serves c: bf16 caches with grouped queries go
// to attention_decode_gqa.cu by default, and to the block per q head with it switched off.
template <typename F>
std::string each_kernel(const Config& c, uint32_t seed, F check) {
  std::string err;
  for (bool gqa : {true, false}) {
    if (gqa && c.dt != DType::BF16) continue;
    cuda::set_attention_gqa(gqa);
    const std::string e = check(c, seed);
    if (!e.empty()) err += fmt::format("[{}] {}", gqa ? "gqa kernel" : "per-head kernel", e);
  }
  cuda::set_attention_gqa(true);
  return err;
}
}  // namespace

std::vector<Check> rope_decode_checks() {
  return {{"attention/decode_fused_rope",
           [] {
             std::string err;
             uint32_t seed = 300;
             for (const Config& c : configs()) err += each_kernel(c, seed += 11, check_config);
             return err;
           }},
          {"attention/decode_fused_rope_graph", [] {
             std::string err;
             uint32_t seed = 500;
             for (const Config& c : configs())
               if (c.split) err += each_kernel(c, seed += 13, check_graph);
             return err;
           }}};
}

}  // namespace ft::cuda_checks
