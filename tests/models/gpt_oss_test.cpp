// gpt-oss family beyond the golden parity (parity_test.cpp): hub MXFP4 expert checkpoints
// (*_blocks / *_scales) load as MXFP4 views, equal their dequantized bf16 twin row for row and
// give its logits; the fixture's sliding window matters; the clamped SwiGLU and the attention
// sink/window op against scalar formulas; a GGUF keeps MXFP4 experts bit-exact; config errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../io/gguf_test_util.h"
#include "log_probs.h"
#include "base/error.h"
#include "base/half.h"
#include "io/mmap.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"
#include "model/ft_checkpoint.h"
#include "model/gguf_export.h"
#include "model/transformer.h"
#include "ops/ops.h"
#include "parallel/tp_plan.h"
#include "quant/formats.h"
#include "quant/quant.h"

namespace ft {
namespace {

namespace fs = std::filesystem;
using test::TempDir;
using test::all_logits;
using test::worst_row_ratio;

const std::string k_fixture = std::string(FT_FIXTURES) + "/gpt_oss";

std::vector<int32_t> prompt_ids() {
  auto ref = SafetensorsSet::open_file(k_fixture + "/reference.safetensors");
  const TensorView& t = ref.get("prompt_ids");
  std::vector<int32_t> ids(t.numel());
  for (int64_t i = 0; i < t.numel(); ++i) ids[i] = static_cast<int32_t>(t.as<int64_t>()[i]);
  return ids;
}

nlohmann::json fixture_config() {
  return nlohmann::json::parse(read_file(k_fixture + "/config.json"));
}

void write_json(const std::string& path, const nlohmann::json& j) {
  std::ofstream(path) << j.dump(2);
}

// Tensors to write: views plus the buffers they point into.
struct Tensors {
  std::vector<TensorView> views;
  std::vector<std::vector<uint8_t>> bufs;
  void add(const std::string& name, DType dt, std::vector<int64_t> shape, std::vector<uint8_t> b) {
    bufs.push_back(std::move(b));
    TensorView v;
    v.name = name;
    v.dtype = dt;
    v.ndim = static_cast<int>(shape.size());
    for (size_t i = 0; i < shape.size(); ++i) v.shape[i] = shape[i];
    v.data = bufs.back().data();
    views.push_back(v);
  }
};

// The fixture rewritten with MXFP4 gate_up_proj (hub layout: rows = 2I interleaved gate/up
// outputs, blocks [E, 2I, H/32, 16] with element 2j in the low nibble of byte j, e8m0 scales
// [E, 2I, H/32]) in `mx`, and the same weights dequantized back to bf16 [E, H, 2I] in `twin`.
// down_proj stays bf16: the fixture's I = 48 is not whole 32-element blocks.
void write_mxfp4_pair(const std::string& mx, const std::string& twin) {
  fs::create_directories(mx);
  fs::create_directories(twin);
  nlohmann::json cfg = fixture_config();
  write_json(twin + "/config.json", cfg);
  cfg["quantization_config"] = {{"quant_method", "mxfp4"}};
  write_json(mx + "/config.json", cfg);
  const SafetensorsSet src = SafetensorsSet::open_dir(k_fixture);
  std::deque<Tensors> keep(2);
  Tensors &a = keep[0], &b = keep[1];
  a.bufs.reserve(1024);
  b.bufs.reserve(1024);
  for (const std::string& name : src.names()) {
    const TensorView& t = src.get(name);
    const auto* bytes = static_cast<const uint8_t*>(t.data);
    std::vector<uint8_t> raw(bytes, bytes + t.nbytes());
    std::vector<int64_t> shape(t.shape.begin(), t.shape.begin() + t.ndim);
    const std::string suffix = "experts.gate_up_proj";
    if (name.size() < suffix.size() ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix)) {
      a.add(name, t.dtype, shape, raw);
      b.add(name, t.dtype, shape, std::move(raw));
      continue;
    }
    ASSERT_EQ(t.dtype, DType::BF16);
    const int64_t E = t.shape[0], H = t.shape[1], R = t.shape[2], nb = H / 32;
    std::vector<uint8_t> blocks(E * R * nb * 16), scales(E * R * nb);
    std::vector<uint16_t> back(E * H * R);
    std::vector<float> row(H), deq(H);
    std::vector<quant::BlockMXFP4> q(nb);
    for (int64_t e = 0; e < E; ++e)
      for (int64_t r = 0; r < R; ++r) {
        for (int64_t h = 0; h < H; ++h) row[h] = bf16_to_f32(t.as<uint16_t>()[(e * H + h) * R + r]);
        quant::quantize_row(quant::QuantType::MXFP4, row.data(), q.data(), H);
        quant::dequantize_row(quant::QuantType::MXFP4, q.data(), deq.data(), H);
        for (int64_t k = 0; k < nb; ++k) {
          uint8_t v[32];
          for (int i = 0; i < 16; ++i) v[i] = q[k].qs[i] & 0xf, v[i + 16] = q[k].qs[i] >> 4;
          const int64_t at = (e * R + r) * nb + k;
          scales[at] = q[k].e;
          for (int j = 0; j < 16; ++j)
            blocks[at * 16 + j] = static_cast<uint8_t>(v[2 * j] | (v[2 * j + 1] << 4));
        }
        for (int64_t h = 0; h < H; ++h) {
          back[(e * H + h) * R + r] = f32_to_bf16(deq[h]);
          ASSERT_EQ(bf16_to_f32(back[(e * H + h) * R + r]), deq[h]) << "e2m1 * 2^k fits bf16";
        }
      }
    const std::string base = name.substr(0, name.size() - std::string("gate_up_proj").size());
    a.add(base + "gate_up_proj_blocks", DType::U8, {E, R, nb, 16}, std::move(blocks));
    a.add(base + "gate_up_proj_scales", DType::U8, {E, R, nb}, std::move(scales));
    std::vector<uint8_t> bb(back.size() * 2);
    std::memcpy(bb.data(), back.data(), bb.size());
    b.add(name, DType::BF16, shape, std::move(bb));
  }
  write_safetensors(mx + "/model.safetensors", a.views);
  write_safetensors(twin + "/model.safetensors", b.views);
}

TEST(GptOss, Mxfp4ExpertsLoadAsMxfp4AndMatchTheirDequantizedTwin) {
  TempDir tmp;
  write_mxfp4_pair(tmp.file("mx"), tmp.file("twin"));
  auto mx = Model::load(tmp.file("mx"));
  auto twin = Model::load(tmp.file("twin"));
  const ModelConfig& c = mx->config();
  for (int64_t l = 0; l < c.n_layers; ++l)
    for (int64_t e = 0; e < c.n_experts; ++e) {
      const ExpertWeights& q = mx->weights().layers[l].experts[e];
      const ExpertWeights& f = twin->weights().layers[l].experts[e];
      ASSERT_EQ(q.gate.dtype, DType::MXFP4);
      ASSERT_EQ(q.up.dtype, DType::MXFP4);
      ASSERT_EQ(q.down.dtype, DType::BF16);
      ASSERT_EQ(f.gate.dtype, DType::BF16);
      for (auto [a, b] : {std::pair{&q.gate, &f.gate}, {&q.up, &f.up}, {&q.down, &f.down}}) {
        ASSERT_EQ(a->shape, b->shape);
        std::vector<float> x(a->numel()), y(b->numel());
        quant::dequantize_rows(*a, 0, a->shape[0], x.data());
        quant::dequantize_rows(*b, 0, b->shape[0], y.data());
        ASSERT_EQ(x, y) << "layer " << l << " expert " << e << " " << a->name;
      }
    }
  // The MXFP4 GEMV quantizes activations (to 8 bits), so logits agree closely, not bitwise;
  // the random fixture's near-tied routers amplify that (measured 4e-2 worst row).
  const auto ids = prompt_ids();
  const auto a = all_logits(*mx, ids), b = all_logits(*twin, ids);
  const float r = worst_row_ratio(a, b, c.vocab_size);
  int64_t same_argmax = 0;
  const int64_t V = c.vocab_size, T = static_cast<int64_t>(ids.size());
  for (int64_t t = 0; t < T; ++t)
    same_argmax += std::max_element(a.begin() + t * V, a.begin() + (t + 1) * V) - a.begin() ==
                   std::max_element(b.begin() + t * V, b.begin() + (t + 1) * V) - b.begin();
  std::printf(
      "[ gpt_oss ] MXFP4 experts vs dequantized bf16 twin: worst max|d|/max|ref| %.2e, "
      "argmax equal at %lld/%lld positions\n",
      r, static_cast<long long>(same_argmax), static_cast<long long>(T));
  EXPECT_LT(r, 0.1f);
  EXPECT_GE(same_argmax, T - 2);
}

TEST(GptOss, MissingMxfp4ScalesIsAClearError) {
  TempDir tmp;
  write_mxfp4_pair(tmp.file("mx"), tmp.file("twin"));
  // Rewrite the checkpoint without layer 0's scales.
  const SafetensorsSet s = SafetensorsSet::open_dir(tmp.file("mx"));
  std::vector<TensorView> kept;
  for (const auto& n : s.names())
    if (n != "model.layers.0.mlp.experts.gate_up_proj_scales") kept.push_back(s.get(n));
  write_safetensors(tmp.file("model.safetensors"), kept);
  fs::copy_file(tmp.file("model.safetensors"), tmp.file("mx") + "/model.safetensors",
                fs::copy_options::overwrite_existing);
  try {
    Model::load(tmp.file("mx"));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("gate_up_proj_scales"), std::string::npos) << e.what();
  }
}

TEST(GptOss, SlidingWindowMattersInTheFixture) {
  // The same weights with every layer full attention: identical while the prompt fits in the
  // window (8), different after.
  TempDir tmp;
  nlohmann::json cfg = fixture_config();
  for (auto& t : cfg["layer_types"]) t = "full_attention";
  write_json(tmp.file("config.json"), cfg);
  fs::copy_file(k_fixture + "/model.safetensors", tmp.file("model.safetensors"));
  auto sliding = Model::load(k_fixture);
  auto full = Model::load(tmp.path.string());
  EXPECT_EQ(sliding->config().window(0), 8);
  EXPECT_EQ(sliding->config().window(1), 0);
  EXPECT_EQ(full->config().window(0), 0);
  const auto ids = prompt_ids();
  const int64_t V = sliding->config().vocab_size;
  const auto a = all_logits(*sliding, ids), b = all_logits(*full, ids);
  for (int64_t t = 0; t < static_cast<int64_t>(ids.size()); ++t) {
    const std::vector<float> ra(a.begin() + t * V, a.begin() + (t + 1) * V);
    const std::vector<float> rb(b.begin() + t * V, b.begin() + (t + 1) * V);
    if (t < 8)
      EXPECT_EQ(ra, rb) << "position " << t;
    else
      EXPECT_GT(worst_row_ratio(ra, rb, V), 1e-2f) << "position " << t;
  }
}

TEST(GptOss, ClampedSwigluMatchesTheFormula) {
  ThreadPool pool(2, false);
  const std::vector<float> g = {-20.f, -1.f, 0.f, 0.5f, 3.f, 6.99f, 7.f, 12.f, 40000.f};
  const std::vector<float> u = {9.f, -9.f, 0.25f, -0.5f, 2.f, 7.5f, -7.5f, 1.f, 0.f};
  std::vector<float> y(g.size());
  ops::swiglu_oai(pool, g.data(), u.data(), static_cast<int64_t>(g.size()), 1.702f, 7.f, y.data());
  for (size_t i = 0; i < g.size(); ++i) {
    const double gc = std::min<double>(g[i], 7.0), uc = std::clamp<double>(u[i], -7.0, 7.0);
    const double want = gc / (1.0 + std::exp(-1.702 * gc)) * (uc + 1.0);
    EXPECT_NEAR(y[i], want, 1e-5 * std::max(1.0, std::fabs(want))) << i;
  }
}

// Attention with a window and sinks vs the direct formula: softmax over the window's scores
// plus the sink logit, the sink carrying no value.
TEST(GptOss, AttentionWindowAndSinksMatchTheFormula) {
  ThreadPool pool(2, false);
  const int64_t T = 11, pos0 = 3, heads = 4, kvh = 2, hd = 8, W = 5, len = pos0 + T;
  std::vector<float> q(T * heads * hd), k(len * kvh * hd), v(len * kvh * hd), out(T * heads * hd);
  uint32_t s = 1;
  auto rnd = [&] { return (s = s * 1664525u + 1013904223u) / 4294967296.f - 0.5f; };
  for (auto* x : {&q, &k, &v})
    for (float& f : *x) f = 4 * rnd();
  const std::vector<float> sinks = {0.5f, -1.f, 2.f, 0.f};
  const float scale = 1.f / std::sqrt(static_cast<float>(hd));
  ops::attention(pool, ops::AttentionArgs{.q = q.data(),
                                          .n_tokens = T,
                                          .pos0 = pos0,
                                          .k_cache = k.data(),
                                          .v_cache = v.data(),
                                          .n_heads = heads,
                                          .n_kv_heads = kvh,
                                          .head_dim = hd,
                                          .scale = scale,
                                          .out = out.data(),
                                          .window = W,
                                          .sinks = sinks.data()});
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t p = pos0 + t, g = h / (heads / kvh);
      std::vector<double> sc;
      double mx = sinks[h];
      for (int64_t j = std::max<int64_t>(0, p - W + 1); j <= p; ++j) {
        double d = 0;
        for (int64_t i = 0; i < hd; ++i)
          d += q[(t * heads + h) * hd + i] * k[(j * kvh + g) * hd + i];
        sc.push_back(d * scale);
        mx = std::max(mx, sc.back());
      }
      double z = std::exp(sinks[h] - mx);
      for (double& x : sc) z += (x = std::exp(x - mx));
      for (int64_t i = 0; i < hd; ++i) {
        double o = 0;
        int64_t j = std::max<int64_t>(0, p - W + 1);
        for (double w : sc) o += w / z * v[(j++ * kvh + g) * hd + i];
        EXPECT_NEAR(out[(t * heads + h) * hd + i], o, 1e-5) << t << " " << h << " " << i;
      }
    }
}

// A GGUF written from the MXFP4 checkpoint keeps the experts' MXFP4 blocks (a byte copy) and
// gives bit-identical logits; the gpt-oss tensors (sinks, biases) and window come back.
TEST(GptOss, GgufKeepsMxfp4ExpertsBitExact) {
  TempDir tmp;
  write_mxfp4_pair(tmp.file("mx"), tmp.file("twin"));
  auto mx = Model::load(tmp.file("mx"));
  GgufWriter w;
  gguf_add_model(w, *mx, {.type = std::nullopt, .name = "t"});
  auto gg = Model::load(w.write(tmp.file("m.gguf")).front());
  const LayerWeights &L = gg->weights().layers[0], &M = mx->weights().layers[0];
  EXPECT_EQ(L.experts[3].gate.dtype, DType::MXFP4);
  EXPECT_EQ(L.experts[3].up.dtype, DType::MXFP4);
  EXPECT_EQ(std::memcmp(L.experts[3].up.data, M.experts[3].up.data, M.experts[3].up.nbytes()), 0);
  EXPECT_EQ(L.sinks, M.sinks);
  EXPECT_EQ(L.router_bias, M.router_bias);
  EXPECT_EQ(L.expert_gate_bias, M.expert_gate_bias);
  EXPECT_EQ(L.expert_down_bias, M.expert_down_bias);
  EXPECT_EQ(gg->config().window(0), 8);
  EXPECT_EQ(gg->config().window(1), 0);
  EXPECT_FALSE(gg->config().rope.truncate);
  EXPECT_EQ(gg->config().expert_act.kind, ExpertActivation::Kind::SWIGLU_OAI);
  const auto ids = prompt_ids();
  const auto a = all_logits(*gg, ids), b = all_logits(*mx, ids);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
}

TEST(GptOss, BadLayerTypeIsAClearError) {
  TempDir tmp;
  nlohmann::json cfg = fixture_config();
  cfg["layer_types"][1] = "chunked_attention";
  write_json(tmp.file("config.json"), cfg);
  fs::copy_file(k_fixture + "/model.safetensors", tmp.file("model.safetensors"));
  try {
    Model::load(tmp.path.string());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layer_types[1] 'chunked_attention'"), std::string::npos)
        << e.what();
  }
}

// gpt-oss's expert widths (hidden = intermediate = 2880: 90 MXFP4 blocks, not whole 256-element
// super-blocks) through the CPU matmul, 1..5 tokens (the fused decode GEMV) and 33 (GEMM), vs
// the dequantized f32 matrix: within the 8-bit activation rounding.
TEST(GptOss, Mxfp4MatmulAtGptOssWidths) {
  ThreadPool pool(2, false);
  const int64_t rows = 48, cols = 2880, nb = cols / 32;
  std::vector<quant::BlockMXFP4> q(rows * nb);
  uint32_t s = 7;
  auto rnd = [&] { return (s = s * 1664525u + 1013904223u) / 4294967296.f - 0.5f; };
  std::vector<float> row(cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (float& x : row) x = rnd() * (r % 3 + 1);
    quant::quantize_row(quant::QuantType::MXFP4, row.data(), q.data() + r * nb, cols);
  }
  TensorView w;
  w.dtype = DType::MXFP4;
  w.ndim = 2;
  w.shape = {rows, cols, 1, 1};
  w.data = q.data();
  w.name = "mxfp4 [48, 2880]";
  std::vector<float> deq(rows * cols);
  quant::dequantize_rows(w, 0, rows, deq.data());
  for (int64_t n : {1, 2, 3, 4, 5, 33}) {
    std::vector<float> x(n * cols), y(n * rows);
    for (float& v : x) v = 2 * rnd();
    ops::matmul(pool, x.data(), n, w, y.data());
    for (int64_t t = 0; t < n; ++t)
      for (int64_t r = 0; r < rows; ++r) {
        double ref = 0, mag = 0;
        for (int64_t c = 0; c < cols; ++c) {
          ref += double(x[t * cols + c]) * deq[r * cols + c];
          mag += std::fabs(double(x[t * cols + c]) * deq[r * cols + c]);
        }
        EXPECT_NEAR(y[t * rows + r], ref, 1e-2 * mag + 1e-4)
            << "n " << n << " t " << t << " r " << r;
      }
  }
}

// Fast-load checkpoints written before the gpt-oss fields existed still read (the fields take
// their defaults); a gpt-oss config round-trips them.
TEST(GptOss, FastLoadConfigFieldsAreOptionalForOlderCheckpoints) {
  auto qwen = Model::load(std::string(FT_FIXTURES) + "/qwen3_moe");
  nlohmann::json old = config_to_json(qwen->config());
  for (const char* k : {"sliding_window", "layer_sliding", "attn_sinks", "moe_bias",
                        "expert_act.kind", "expert_act.alpha", "expert_act.limit"})
    ASSERT_EQ(old.erase(k), 1u) << k;
  EXPECT_EQ(config_to_json(config_from_json(old, "old.json")), config_to_json(qwen->config()));
  auto oss = Model::load(k_fixture);
  const ModelConfig back = config_from_json(config_to_json(oss->config()), "oss.json");
  EXPECT_EQ(back.layer_sliding, oss->config().layer_sliding);
  EXPECT_EQ(back.expert_act.kind, ExpertActivation::Kind::SWIGLU_OAI);
  EXPECT_TRUE(back.attn_sinks && back.moe_bias);
  old.erase("hidden");  // the original fields stay required
  EXPECT_THROW(config_from_json(old, "old.json"), Error);
}

// Tensor parallelism plans gpt-oss (sinks, windows and expert biases shard with the heads and
// expert columns: tests/parallel/tp_plan_test.cpp); heads that do not divide stay refused.
TEST(GptOss, TensorParallelPlansIt) {
  auto m = Model::load(k_fixture);
  EXPECT_NO_THROW(plan_tensor_parallel(m->config(), 1));
  EXPECT_NO_THROW(plan_tensor_parallel(m->config(), 2));
  try {
    plan_tensor_parallel(m->config(), 3);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("attention heads"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ft
