// CUDA checks of the hybrid families' ops (causal conv1d, DeltaNet prep, gated delta rule,
// gated RMSNorm, gated attention, shared-expert gate) against the CPU ops / the CPU forward's
// arithmetic over shapes and multi-sequence step layouts, plus CudaTransformer's recurrent
// state: export/import between sequences and from the CPU KVCache, and the position rule.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>

#include "backend/cpu/kernels.h"
#include "base/error.h"
#include "cuda_checks.h"
#include "io/safetensors.h"
#include "model/cuda_transformer.h"
#include "model/transformer.h"
#include "ops/delta_net.h"

namespace ft::cuda_checks {

namespace {
using cuda::DeviceBuffer;

// max|got - ref| <= tol * max(1, max|ref|).
std::string close(const std::vector<float>& got, const std::vector<float>& ref, float tol,
                  const std::string& what) {
  if (got.size() != ref.size()) return what + ": size differs\n";
  float max_ref = 1.f, max_d = 0.f;
  size_t at = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    max_ref = std::max(max_ref, std::fabs(ref[i]));
    const float d = std::fabs(got[i] - ref[i]);
    if (!(d <= max_d)) max_d = d, at = i;
  }
  if (max_d <= tol * max_ref) return "";
  return fmt::format("{}: max|d| {} at {} (got {}, ref {})\n", what, max_d, at, got[at], ref[at]);
}

// Token layout of a pass: steps of (sequence, length); seq ids per token.
std::vector<int32_t> seq_ids(const std::vector<std::pair<int, int64_t>>& steps) {
  std::vector<int32_t> s;
  for (auto [seq, n] : steps) s.insert(s.end(), n, seq);
  return s;
}

ThreadPool& pool() {
  static ThreadPool p(2, false);
  return p;
}

const std::vector<std::vector<std::pair<int, int64_t>>> k_layouts = {
    {{0, 1}}, {{0, 3}}, {{2, 1}, {0, 1}, {1, 1}}, {{1, 70}}, {{0, 5}, {2, 1}, {1, 130}}};

// Two passes of each layout (the second continues the states) vs ops::causal_conv1d_silu.
std::string conv_check(int64_t channels, int64_t kernel) {
  std::string err;
  const int seqs = 3;
  const int64_t hist = kernel - 1;
  const std::vector<float> w = randv(channels * kernel, 11, 0.5f);
  DeviceBuffer dw = up(w);
  for (const auto& layout : k_layouts) {
    std::vector<float> state = randv(seqs * channels * hist, 12);
    DeviceBuffer ds = up(state);
    for (int pass = 0; pass < 2; ++pass) {
      const std::vector<int32_t> seq = seq_ids(layout);
      const int64_t n = static_cast<int64_t>(seq.size());
      const std::vector<float> x = randv(n * channels, 13 + pass);
      std::vector<float> ref(n * channels);
      int64_t t0 = 0;
      for (auto [s, len] : layout) {
        ops::causal_conv1d_silu(pool(), x.data() + t0 * channels, len, channels, w.data(), kernel,
                                state.data() + s * channels * hist, ref.data() + t0 * channels);
        t0 += len;
      }
      DeviceBuffer dx = up(x), dseq = up(seq), dout(n * channels * sizeof(float));
      cuda::causal_conv1d_silu({.x = dx.as<float>(),
                                .out = dout.as<float>(),
                                .n = n,
                                .channels = channels,
                                .w = dw.as<float>(),
                                .kernel = kernel,
                                .state = ds.as<float>(),
                                .seq_stride = channels * hist,
                                .seq = dseq.as<int32_t>()});
      const std::string what = fmt::format("conv C {} K {} steps {} pass {}", channels, kernel,
                                           layout.size(), pass);
      err += close(down(dout, n * channels), ref, 1e-5f, what + " out");
      err += close(down(ds, state.size()), state, 0.f, what + " state");
    }
  }
  return err;
}

// delta_prep vs model/delta_net_block.cpp's loop.
std::string prep_check(int64_t nk, int64_t dk, int64_t nv, int64_t dv) {
  const int64_t n = 7, K = nk * dk, cd = 2 * K + nv * dv;
  std::vector<float> qkv = randv(n * cd, 21), b = randv(n * nv, 22, 2.f), a = randv(n * nv, 23, 8.f);
  const std::vector<float> a_log = randv(nv, 24), dt = randv(nv, 25);
  DeviceBuffer dq = up(qkv), db = up(b), da = up(a), dal = up(a_log), ddt = up(dt);
  const float scale = 1.f / std::sqrt(static_cast<float>(dk));
  cuda::delta_prep({.qkv = dq.as<float>(),
                    .n = n,
                    .stride = cd,
                    .n_k_heads = nk,
                    .k_dim = dk,
                    .key_dim = K,
                    .q_scale = scale,
                    .b = db.as<float>(),
                    .a = da.as<float>(),
                    .a_log = dal.as<float>(),
                    .dt_bias = ddt.as<float>(),
                    .n_v_heads = nv});
  auto l2 = [](float* x, int64_t m) {
    float ss = 0.f;
    for (int64_t i = 0; i < m; ++i) ss += x[i] * x[i];
    const float inv = 1.f / std::sqrt(ss + 1e-6f);
    for (int64_t i = 0; i < m; ++i) x[i] *= inv;
  };
  for (int64_t t = 0; t < n; ++t) {
    float* row = qkv.data() + t * cd;
    for (int64_t h = 0; h < nk; ++h) {
      l2(row + h * dk, dk);
      for (int64_t i = 0; i < dk; ++i) row[h * dk + i] *= scale;
      l2(row + K + h * dk, dk);
    }
    for (int64_t h = 0; h < nv; ++h) {
      float& bb = b[t * nv + h];
      float& aa = a[t * nv + h];
      bb = 1.f / (1.f + std::exp(-bb));
      const float sp = aa + dt[h] > 20.f ? aa + dt[h] : std::log1p(std::exp(aa + dt[h]));
      aa = -std::exp(a_log[h]) * sp;
    }
  }
  const std::string what = fmt::format("delta_prep nk {} dk {} nv {}", nk, dk, nv);
  return close(down(dq, qkv.size()), qkv, 1e-5f, what + " qkv") +
         close(down(db, b.size()), b, 1e-5f, what + " beta") +
         close(down(da, a.size()), a, 1e-5f, what + " g");
}

// Layouts for the chunked form: chunk (64) boundaries, lengths not a multiple of 64, several
// sequences of mixed lengths (decode-sized among them) in one pass.
const std::vector<std::vector<std::pair<int, int64_t>>> k_chunk_layouts = {
    {{0, 64}}, {{1, 128}}, {{0, 200}}, {{2, 63}, {0, 65}}, {{1, 1}, {0, 129}, {2, 7}},
    {{0, 300}, {1, 64}, {2, 2}}};

// gated_delta_rule (recurrent) or gated_delta_rule_chunked over multi-sequence layouts (two
// passes each; the states start non-zero) vs ops:: (recurrent for one token, chunked
// otherwise, as the CPU forward runs it).
std::string rule_check(int64_t nk, int64_t dk, int64_t nv, int64_t dv, bool chunked = false) {
  std::string err;
  const int seqs = 3;
  const int64_t K = nk * dk, stride = 2 * K + nv * dv, ssm = nv * dk * dv;
  for (const auto& layout : chunked ? k_chunk_layouts : k_layouts) {
    std::vector<float> state = randv(seqs * ssm, 31, 0.1f);
    DeviceBuffer ds = up(state);
    for (int pass = 0; pass < 2; ++pass) {
      const std::vector<int32_t> seq = seq_ids(layout);
      const int64_t n = static_cast<int64_t>(seq.size());
      std::vector<float> qkv = randv(n * stride, 32 + pass);
      for (int64_t t = 0; t < n; ++t)  // unit q, k (as after delta_prep)
        for (int64_t h = 0; h < 2 * nk; ++h) {
          float* x = qkv.data() + t * stride + h * dk;
          float ss = 0.f;
          for (int64_t i = 0; i < dk; ++i) ss += x[i] * x[i];
          for (int64_t i = 0; i < dk; ++i) x[i] /= std::sqrt(ss);
        }
      std::vector<float> g = randv(n * nv, 34 + pass, 0.5f), beta = randv(n * nv, 36 + pass);
      for (float& v : g) v = -std::fabs(v);
      for (float& v : beta) v = 1.f / (1.f + std::exp(-v));
      std::vector<float> ref(n * nv * dv);
      std::vector<ops::DeltaRuleArgs> args;
      int64_t t0 = 0;
      for (auto [s, len] : layout) {
        args.push_back({.q = qkv.data() + t0 * stride,
                        .k = qkv.data() + t0 * stride + K,
                        .v = qkv.data() + t0 * stride + 2 * K,
                        .qkv_stride = stride,
                        .g = g.data() + t0 * nv,
                        .beta = beta.data() + t0 * nv,
                        .n = len,
                        .n_k_heads = nk,
                        .n_v_heads = nv,
                        .k_dim = dk,
                        .v_dim = dv,
                        .state = state.data() + s * ssm,
                        .out = ref.data() + t0 * nv * dv});
        t0 += len;
      }
      ops::gated_delta_rule(pool(), args);
      DeviceBuffer dq = up(qkv), dg = up(g), db = up(beta), dseq = up(seq),
                   dout(n * nv * dv * sizeof(float));
      const float* q = dq.as<float>();
      const cuda::DeltaRuleArgs rule{.q = q,
                                     .k = q + K,
                                     .v = q + 2 * K,
                                     .qkv_stride = stride,
                                     .g = dg.as<float>(),
                                     .beta = db.as<float>(),
                                     .n = n,
                                     .n_k_heads = nk,
                                     .n_v_heads = nv,
                                     .k_dim = dk,
                                     .v_dim = dv,
                                     .state = ds.as<float>(),
                                     .seq_stride = ssm,
                                     .seq = dseq.as<int32_t>(),
                                     .out = dout.as<float>()};
      std::vector<int64_t> starts{0};
      for (auto [s, len] : layout) starts.push_back(starts.back() + len);
      if (chunked)
        cuda::gated_delta_rule_chunked(rule, starts);
      else
        cuda::gated_delta_rule(rule);
      const std::string what =
          fmt::format("delta rule{} nk {} dk {} nv {} dv {} steps {} n {} pass {}",
                      chunked ? " chunked" : "", nk, dk, nv, dv, layout.size(), n, pass);
      err += close(down(dout, ref.size()), ref, 1e-4f, what + " out");
      err += close(down(ds, state.size()), state, 1e-4f, what + " state");
    }
  }
  return err;
}

// gated_rmsnorm, split_q_gate + attn_output_gate, add_sigmoid_scaled vs the CPU forward's loops.
std::string small_ops_check(int64_t rows, int64_t dim) {
  std::string err;
  const auto& kr = cpu::kernels();
  {
    std::vector<float> o = randv(rows * dim, 41), z = randv(rows * dim, 42, 2.f),
                       w = randv(dim, 43);
    DeviceBuffer d_o = up(o), dz = up(z), dw = up(w);
    cuda::gated_rmsnorm(d_o.as<float>(), dz.as<float>(), rows, dim, dw.as<float>(), 1e-6f);
    for (int64_t r = 0; r < rows; ++r) {
      float* x = o.data() + r * dim;
      kr.rmsnorm(x, w.data(), 1e-6f, dim, x);
      for (int64_t j = 0; j < dim; ++j) x[j] *= z[r * dim + j] / (1.f + std::exp(-z[r * dim + j]));
    }
    err += close(down(d_o, o.size()), o, 1e-5f, fmt::format("gated_rmsnorm {}x{}", rows, dim));
  }
  {
    const int64_t n = 3, heads = rows % 7 + 1, hd = dim;
    const std::vector<float> qg = randv(n * heads * 2 * hd, 44, 2.f);
    std::vector<float> att = randv(n * heads * hd, 45), q(n * heads * hd);
    DeviceBuffer dqg = up(qg), datt = up(att), dq(q.size() * sizeof(float));
    cuda::split_q_gate(dqg.as<float>(), n, heads, hd, dq.as<float>());
    cuda::attn_output_gate(datt.as<float>(), dqg.as<float>(), n, heads, hd);
    for (int64_t t = 0; t < n; ++t)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t d = 0; d < hd; ++d) {
          const float* src = qg.data() + (t * heads + h) * 2 * hd;
          q[(t * heads + h) * hd + d] = src[d];
          att[(t * heads + h) * hd + d] /= 1.f + std::exp(-src[hd + d]);
        }
    err += close(down(dq, q.size()), q, 0.f, fmt::format("split_q_gate {}x{}", heads, hd));
    err += close(down(datt, att.size()), att, 1e-6f,
                 fmt::format("attn_output_gate {}x{}", heads, hd));
  }
  {
    std::vector<float> x = randv(rows * dim, 46), y = randv(rows * dim, 47),
                       logit = randv(rows, 48, 3.f);
    DeviceBuffer dx = up(x), dy = up(y), dl = up(logit);
    cuda::add_sigmoid_scaled(dx.as<float>(), dy.as<float>(), dl.as<float>(), rows, dim);
    for (int64_t t = 0; t < rows; ++t) {
      const float g = 1.f / (1.f + std::exp(-logit[t]));
      for (int64_t j = 0; j < dim; ++j) x[t * dim + j] += g * y[t * dim + j];
    }
    err += close(down(dx, x.size()), x, 1e-6f, fmt::format("add_sigmoid_scaled {}x{}", rows, dim));
  }
  return err;
}

struct Ref {
  std::unique_ptr<Model> model;
  std::unique_ptr<SafetensorsSet> files;
  std::vector<int32_t> prompt, greedy;
  const float* prefill = nullptr;
  const float* decode = nullptr;
};

Ref load_ref(const std::string& dir) {
  Ref r;
  r.model = Model::load(dir);
  r.files =
      std::make_unique<SafetensorsSet>(SafetensorsSet::open_file(dir + "/reference.safetensors"));
  auto ids = [&](const char* name) {
    const TensorView& t = r.files->get(name);
    std::vector<int32_t> out(t.numel());
    for (int64_t i = 0; i < t.numel(); ++i) out[i] = static_cast<int32_t>(t.as<int64_t>()[i]);
    return out;
  };
  r.prompt = ids("prompt_ids");
  r.greedy = ids("greedy_ids");
  r.prefill = r.files->get("prefill_logits").as<float>();
  r.decode = r.files->get("decode_logits").as<float>();
  return r;
}

std::string logits_close(const std::vector<float>& got, const float* ref, int64_t V,
                         const std::string& what) {
  float max_ref = 0.f, max_d = 0.f;
  for (int64_t i = 0; i < V; ++i) {
    max_ref = std::max(max_ref, std::fabs(ref[i]));
    max_d = std::max(max_d, std::fabs(got[i] - ref[i]));
  }
  if (max_d <= 1e-3f * max_ref) return "";
  return fmt::format("{}: max|d| {} (bound {})\n", what, max_d, 1e-3f * max_ref);
}

// The prompt on sequence 0; its state and KV moved to sequence 1 (read -> write), and, from a
// CPU Transformer's KVCache, to sequence 2; each continues with the reference greedy tokens.
// Also: a step that skips positions is refused.
std::string state_io_check(const std::string& dir) {
  Ref r = load_ref(dir);
  const ModelConfig& c = r.model->config();
  const int64_t T = static_cast<int64_t>(r.prompt.size()), V = c.vocab_size;
  const int64_t N = static_cast<int64_t>(r.greedy.size()), cap = T + N;
  CudaTransformer tf(*r.model, cap, 32, CudaOffload{}, 3);
  std::string err;
  std::vector<float> logits(V);
  tf.forward(r.prompt.data(), T, 0, logits.data(), false);
  err += logits_close(logits, r.prefill + (T - 1) * V, V, "seq 0 prompt");
  if (tf.recurrent_len(0) != T) err += "recurrent_len after the prompt\n";
  const size_t bytes = tf.state_bytes_per_seq();
  const KVCache kv(c, cap);
  if (bytes != (kv.conv.size() + kv.ssm.size()) * sizeof(float))
    return err + fmt::format("state_bytes_per_seq {} != KVCache's {}\n", bytes,
                             (kv.conv.size() + kv.ssm.size()) * sizeof(float));
  std::vector<float> state(bytes / sizeof(float));
  const int64_t na = attention_layers(c), kvd = c.kv_dim();
  std::vector<float> k(na * T * kvd), v(na * T * kvd);
  tf.read_state(0, state.data());
  tf.read_kv(0, 0, T, k.data(), v.data());  // in two pieces: [0, 5) and [5, T)
  tf.write_state(1, state.data(), T);
  std::vector<float> k1(na * 5 * kvd), v1(na * 5 * kvd), k2(na * (T - 5) * kvd), v2(k2.size());
  for (int64_t a = 0; a < na; ++a) {
    std::copy_n(k.data() + a * T * kvd, 5 * kvd, k1.data() + a * 5 * kvd);
    std::copy_n(v.data() + a * T * kvd, 5 * kvd, v1.data() + a * 5 * kvd);
    std::copy_n(k.data() + (a * T + 5) * kvd, (T - 5) * kvd, k2.data() + a * (T - 5) * kvd);
    std::copy_n(v.data() + (a * T + 5) * kvd, (T - 5) * kvd, v2.data() + a * (T - 5) * kvd);
  }
  tf.write_kv(1, 0, 5, k1.data(), v1.data());
  tf.write_kv(1, 5, T - 5, k2.data(), v2.data());
  // The CPU forward's cache, in its own layout.
  ThreadPool& p = pool();
  Transformer cpu(*r.model, p, 64);
  KVCache ckv(c, cap);
  std::vector<float> cl(V);
  cpu.forward(r.prompt.data(), T, 0, ckv, cl.data(), false);
  std::vector<float> cstate(ckv.conv);
  cstate.insert(cstate.end(), ckv.ssm.begin(), ckv.ssm.end());
  err += close(state, cstate, 1e-3f, "GPU state vs CPU KVCache conv|ssm");
  tf.write_state(2, cstate.data(), ckv.recurrent_len);
  for (int64_t l = 0, a = 0; l < c.n_layers; ++l) {  // KVCache rows of capacity -> [na, T, kvd]
    if (c.is_delta(l)) continue;
    std::copy_n(ckv.k_at(l, 0), T * kvd, k.data() + a * T * kvd);
    std::copy_n(ckv.v_at(l, 0), T * kvd, v.data() + a * T * kvd);
    ++a;
  }
  tf.write_kv(2, 0, T, k.data(), v.data());
  for (int seq = 1; seq <= 2; ++seq) {
    std::vector<float> lg(V);
    for (int64_t i = 0; i + 1 < N; ++i) {
      const CudaSeqStep st{.seq = seq, .ids = &r.greedy[i], .n = 1, .pos0 = T + i, .logits = lg.data()};
      tf.forward_batch({&st, 1});
      err += logits_close(lg, r.decode + (i + 1) * V, V, fmt::format("seq {} step {}", seq, i + 1));
      const int32_t next = static_cast<int32_t>(std::max_element(lg.begin(), lg.end()) - lg.begin());
      if (next != r.greedy[i + 1])
        return err + fmt::format("seq {} greedy step {}: {} != {}\n", seq, i + 1, next,
                                 r.greedy[i + 1]);
    }
  }
  if (c.has_delta()) {
    const CudaSeqStep skip{.seq = 0, .ids = r.prompt.data(), .n = 1, .pos0 = T + 3, .logits = nullptr};
    try {
      tf.forward_batch({&skip, 1});
      err += "a step past the recurrent state was accepted\n";
    } catch (const Error&) {
    }
  }
  return err;
}

// In-pass state captures: a pass of two steps (sequence 0 continuing at position 20, sequence 2
// from 0) with 8 marks (one token into a step, inside the conv history, on and next to chunk
// boundaries, one before the end) keeps at each mark the state a pass of exactly those tokens
// leaves; the pass's own final states are unchanged; a mark on a step's edge is refused.
std::string capture_check(const std::string& dir) {
  Ref r = load_ref(dir);
  const ModelConfig& c = r.model->config();
  const int64_t V = c.vocab_size;
  std::vector<int32_t> a(150), b(70);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<int32_t>((i * 7919 + 13) % V);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<int32_t>((i * 104729 + 5) % V);
  CudaTransformer tf(*r.model, 256, 256, CudaOffload{}, 3);
  if (tf.capture_slots() < 8) return fmt::format("capture_slots {} < 8\n", tf.capture_slots());
  const size_t F = tf.state_bytes_per_seq() / sizeof(float);
  auto state_after = [&](const std::vector<int32_t>& ids, int64_t m) {  // on sequence 1
    const CudaSeqStep st{.seq = 1, .ids = ids.data(), .n = m, .pos0 = 0, .logits = nullptr};
    tf.forward_batch({&st, 1});
    std::vector<float> out(F);
    tf.read_state(1, out.data());
    return out;
  };
  const CudaSeqStep first{.seq = 0, .ids = a.data(), .n = 20, .pos0 = 0, .logits = nullptr};
  tf.forward_batch({&first, 1});
  const std::vector<int64_t> ma{21, 23, 84, 85, 149}, mb{1, 2, 64};
  const CudaSeqStep pass[2] = {
      {.seq = 0, .ids = a.data() + 20, .n = 130, .pos0 = 20, .logits = nullptr,
       .marks = ma.data(), .n_marks = 5},
      {.seq = 2, .ids = b.data(), .n = 70, .pos0 = 0, .logits = nullptr, .marks = mb.data(),
       .n_marks = 3}};
  tf.forward_batch(pass);
  std::string err;
  std::vector<std::vector<float>> got(8, std::vector<float>(F));
  for (int32_t i = 0; i < 8; ++i) tf.read_capture(i, got[i].data());
  std::vector<float> end0(F), end2(F);
  tf.read_state(0, end0.data());
  tf.read_state(2, end2.data());
  for (int32_t i = 0; i < 8; ++i) {
    const bool in_a = i < 5;
    const int64_t m = in_a ? ma[i] : mb[i - 5];
    err += close(got[i], state_after(in_a ? a : b, m), 2e-3f,
                 fmt::format("capture {} (sequence {} at {})", i, in_a ? 0 : 2, m));
  }
  err += close(end0, state_after(a, 150), 2e-3f, "sequence 0 after the pass");
  err += close(end2, state_after(b, 70), 2e-3f, "sequence 2 after the pass");
  for (int64_t m : {int64_t{0}, int64_t{30}}) {  // a step's edges are no marks
    const CudaSeqStep edge{.seq = 1, .ids = a.data(), .n = 30, .pos0 = 0, .logits = nullptr,
                           .marks = &m, .n_marks = 1};
    try {
      tf.forward_batch({&edge, 1});
      err += fmt::format("a mark at {} of a step [0, 30) was accepted\n", m);
    } catch (const Error&) {
    }
  }
  return err;
}
}  // namespace

std::string hybrid_benchmark() {
  // Qwen3-Next / Qwen3.5 / Qwen3.6-35B-A3B DeltaNet shapes: 16 key heads, 32 value heads,
  // 128 x 128 state. Conv1d + the recurrent rule, and the delta rule alone in both forms.
  const int64_t nk = 16, dk = 128, nv = 32, dv = 128, K = nk * dk, stride = 2 * K + nv * dv;
  std::string out;
  for (int64_t n : {int64_t{1}, int64_t{256}, int64_t{4096}, int64_t{16384}}) {
    std::vector<float> qkv = randv(n * stride, 1, 0.1f), g(n * nv, -0.1f), beta(n * nv, 0.5f);
    DeviceBuffer dq = up(qkv), dg = up(g), db = up(beta), dseq = up(std::vector<int32_t>(n, 0)),
                 ds = up(std::vector<float>(nv * dk * dv, 0.f)), dout(n * nv * dv * sizeof(float)),
                 dconv(n * stride * sizeof(float)),
                 dw = up(randv(stride * 4, 2, 0.3f)), dcs = up(std::vector<float>(stride * 3, 0.f));
    const float* q = dq.as<float>();
    const cuda::DeltaRuleArgs rule{.q = q, .k = q + K, .v = q + 2 * K, .qkv_stride = stride,
                                   .g = dg.as<float>(), .beta = db.as<float>(), .n = n,
                                   .n_k_heads = nk, .n_v_heads = nv, .k_dim = dk, .v_dim = dv,
                                   .state = ds.as<float>(), .seq_stride = 0,
                                   .seq = dseq.as<int32_t>(), .out = dout.as<float>()};
    const std::vector<int64_t> starts{0, n};
    auto time_us = [&](const std::function<void()>& run) {
      run();
      cuda::synchronize();
      const int reps = n >= 4096 ? 5 : 50;
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < reps; ++i) run();
      cuda::synchronize();
      return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                 .count() / reps;
    };
    const double us = time_us([&] {
      cuda::causal_conv1d_silu({.x = q, .out = dconv.as<float>(), .n = n, .channels = stride,
                                .w = dw.as<float>(), .kernel = 4, .state = dcs.as<float>(),
                                .seq_stride = 0, .seq = dseq.as<int32_t>()});
      cuda::gated_delta_rule(rule);
    });
    out += fmt::format("deltanet conv1d + delta rule, one layer (16/32 heads, 128x128 state), {} "
                       "tokens: {:.1f} us ({:.0f} tokens/s per layer)\n",
                       n, us, n * 1e6 / us);
    if (n < 64) continue;
    const double rec = time_us([&] { cuda::gated_delta_rule(rule); });
    const double chk = time_us([&] { cuda::gated_delta_rule_chunked(rule, starts); });
    out += fmt::format("delta rule, one layer, {} tokens: recurrent {:.1f} us, chunked {:.1f} us "
                       "({:.2f}x)\n", n, rec, chk, rec / chk);
  }
  return out;
}

std::vector<Check> hybrid_checks(const std::string& fixtures_dir) {
  std::vector<Check> out;
  for (auto [c, k] : {std::pair<int64_t, int64_t>{160, 4}, {37, 2}, {8192, 4}})
    out.push_back({fmt::format("hybrid/conv1d_{}_{}", c, k), [c, k] { return conv_check(c, k); }});
  struct Heads {
    int64_t nk, dk, nv, dv;
  };
  for (Heads h : {Heads{2, 16, 4, 16}, Heads{2, 16, 4, 24}, Heads{16, 128, 32, 128},
                  Heads{4, 64, 4, 40}, Heads{1, 32, 3, 8}}) {
    const std::string tag = fmt::format("{}_{}_{}_{}", h.nk, h.dk, h.nv, h.dv);
    out.push_back({"hybrid/delta_prep_" + tag, [h] { return prep_check(h.nk, h.dk, h.nv, h.dv); }});
    out.push_back({"hybrid/delta_rule_" + tag, [h] { return rule_check(h.nk, h.dk, h.nv, h.dv); }});
    out.push_back({"hybrid/delta_chunked_" + tag,
                   [h] { return rule_check(h.nk, h.dk, h.nv, h.dv, true); }});
  }
  for (auto [r, d] : {std::pair<int64_t, int64_t>{5, 16}, {64, 128}, {9, 24}})
    out.push_back({fmt::format("hybrid/gates_{}_{}", r, d), [r, d] { return small_ops_check(r, d); }});
  for (const char* f : {"qwen3_5_moe", "qwen3_next"}) {
    const std::string dir = fixtures_dir + "/" + f;
    out.push_back({std::string(f) + "/state_io", [dir] { return state_io_check(dir); }});
    out.push_back({std::string(f) + "/state_capture", [dir] { return capture_check(dir); }});
  }
  return out;
}

}  // namespace ft::cuda_checks
