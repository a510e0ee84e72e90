// Golden fixture parity of CudaTransformer (the same references as tests/models/parity_test.cpp),
// resident and offloaded at several expert-slot counts, decode through captured graphs and
// eagerly, HYBRID offload (CPU share of the misses), multi-sequence forward_batch, and a decode
// timing.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "base/error.h"
#include "cuda_checks.h"
#include "experts/gpu_expert_store.h"
#include "io/safetensors.h"
#include "model/cuda_transformer.h"

namespace ft::cuda_checks {

namespace {
struct Reference {
  std::unique_ptr<Model> model;
  std::unique_ptr<SafetensorsSet> files;
  std::vector<int32_t> prompt, greedy;
  const float* prefill = nullptr;  // [T, V]
  const float* decode = nullptr;   // [N, V]
};

std::vector<int32_t> ids_of(const TensorView& t) {
  std::vector<int32_t> out(t.numel());
  for (int64_t i = 0; i < t.numel(); ++i) out[i] = static_cast<int32_t>(t.as<int64_t>()[i]);
  return out;
}

// kv BF16: the fixture's reference_bf16_kv.safetensors where it has one (gpt-oss: logits with
// K/V rounded to bf16 as the cache holds them; its sinks, windows and near-tied routers move
// with that rounding beyond k_bf16_tol of the f32 logits), else the f32 reference.
Reference load(const std::string& dir, DType kv = DType::F32) {
  Reference r;
  r.model = Model::load(dir);
  const std::string bf16_ref = dir + "/reference_bf16_kv.safetensors";
  const bool bf16 = kv == DType::BF16 && std::filesystem::exists(bf16_ref);
  r.files = std::make_unique<SafetensorsSet>(
      SafetensorsSet::open_file(bf16 ? bf16_ref : dir + "/reference.safetensors"));
  r.prompt = ids_of(r.files->get("prompt_ids"));
  r.greedy = ids_of(r.files->get("greedy_ids"));
  r.prefill = r.files->get("prefill_logits").as<float>();
  r.decode = r.files->get("decode_logits").as<float>();
  return r;
}

int32_t argmax(const float* v, int64_t n) {
  return static_cast<int32_t>(std::max_element(v, v + n) - v);
}

// max|got - ref| <= tol * max|ref| over one row; the message names the row and the worst.
// 1e-3 with f32 KV; a bf16 KV cache (keys and values rounded to 8 bits of mantissa) moves the
// tiny fixtures' logits by up to ~1.9e-2 of their range (mixtral, measured on an H200, the
// same from the flash prefill and the decode kernel): k_bf16_tol.
constexpr float k_bf16_tol = 2.5e-2f;
std::string row_close(const float* got, const float* ref, int64_t n, const std::string& what,
                      float tol = 1e-3f) {
  float max_ref = 0, max_d = 0;
  int64_t at = 0;
  for (int64_t i = 0; i < n; ++i) {
    max_ref = std::max(max_ref, std::fabs(ref[i]));
    const float d = std::fabs(got[i] - ref[i]);
    if (!(d <= max_d)) max_d = d, at = i;
  }
  if (max_d <= tol * max_ref) return "";
  return fmt::format("{}: max|d| {} at {} (got {}, ref {}, bound {})\n", what, max_d, at, got[at],
                     ref[at], tol * max_ref);
}

// Expert slots of an offload check: 0 = resident (no offload), else one layer (MIN), two
// layers (DOUBLE, the double-buffered prefill), half of all experts, all but one (MOST: a
// cache beyond the prefill buffers) or all of them.
enum class Slots { RESIDENT, MIN, DOUBLE, HALF, MOST, ALL };

int64_t slot_count(const Model& m, Slots s) {
  const ModelConfig& c = m.config();
  int64_t moe = 0;
  for (bool b : c.layer_is_moe) moe += b;
  const int64_t all = moe * c.n_experts;
  switch (s) {
    case Slots::RESIDENT:
      return 0;
    case Slots::MIN:
      return c.n_experts;
    case Slots::DOUBLE:
      return std::min(all, 2 * c.n_experts);
    case Slots::HALF:
      return std::max(c.n_experts, all / 2 + 1);
    case Slots::MOST:
      return std::max(c.n_experts, all - 1);
    case Slots::ALL:
      return all;
  }
  return 0;
}

// A CudaTransformer, offloaded when slots != RESIDENT (the pinned experts live beside it).
// HYBRID splits misses evenly between PCIe and the CPU (equal bandwidths).
struct Runner {
  std::unique_ptr<HostExperts> host;
  std::unique_ptr<CudaTransformer> tf;
  Runner(const Model& m, int64_t capacity, int64_t chunk, Slots s,
         MoeMode mode = MoeMode::OFFLOAD, int max_seqs = 1, DType kv = DType::F32) {
    if (s == Slots::RESIDENT) {
      tf = std::make_unique<CudaTransformer>(m, capacity, chunk, CudaOffload{}, max_seqs, kv);
      return;
    }
    host = std::make_unique<HostExperts>(HostExperts::copy_of(m));
    tf = std::make_unique<CudaTransformer>(m, capacity, chunk,
                                           CudaOffload{.experts = host.get(),
                                                       .slots = slot_count(m, s),
                                                       .mode = mode,
                                                       .pcie_Bps = 1e9,
                                                       .cpu_Bps = 1e9,
                                                       .cpu_threads = 2},
                                           max_seqs, kv);
  }
};

// Prefill in one pass (max_chunk >= T) or in chunks of `chunk`: logits at every position.
std::string prefill(const std::string& dir, int64_t chunk, Slots slots = Slots::RESIDENT,
                    DType kv = DType::F32) {
  Reference r = load(dir, kv);
  const int64_t T = static_cast<int64_t>(r.prompt.size()), V = r.model->config().vocab_size;
  const float tol = kv == DType::BF16 ? k_bf16_tol : 1e-3f;
  Runner run(*r.model, T, chunk, slots, MoeMode::OFFLOAD, 1, kv);
  CudaTransformer& tf = *run.tf;
  std::vector<float> logits(T * V);
  tf.forward(r.prompt.data(), T, 0, logits.data(), true);
  std::string err;
  for (int64_t t = 0; t < T; ++t)
    err += row_close(logits.data() + t * V, r.prefill + t * V, V,
                     fmt::format("chunk {} prefill position {}", chunk, t), tol);
  return err;
}

// Token by token through the prompt, then the greedy continuation. BF16 KV: capacity `cap`
// (> k_attention_split_keys: the flash-decoding grid is captured), and a greedy id may differ
// where the reference's top two are within the tolerance (the continuation stops there).
std::string decode(const std::string& dir, Slots slots = Slots::RESIDENT, bool graphs = true,
                   MoeMode mode = MoeMode::OFFLOAD, DType kv = DType::F32, int64_t cap = 0) {
  Reference r = load(dir, kv);
  const int64_t T = static_cast<int64_t>(r.prompt.size()), V = r.model->config().vocab_size;
  const int64_t N = static_cast<int64_t>(r.greedy.size());
  const float tol = kv == DType::BF16 ? k_bf16_tol : 1e-3f;
  Runner run(*r.model, std::max(cap, T + N), 64, slots, mode, 1, kv);
  CudaTransformer& tf = *run.tf;
  tf.set_graphs(graphs);
  std::vector<float> logits(V);
  std::string err;
  for (int64_t t = 0; t < T; ++t) {
    tf.forward(&r.prompt[t], 1, t, logits.data(), false);
    err += row_close(logits.data(), r.prefill + t * V, V, fmt::format("decode position {}", t),
                     tol);
  }
  // Greedy steps 2, 4, ... are read as their id only (forward_argmax: the logits stay on the
  // device); the others' passes return the logits and the device's argmax of them.
  int32_t dev = -1;
  for (int64_t i = 0; i < N; ++i) {
    const float* ref = r.decode + i * V;
    const bool id_only = i % 2 == 0 && i > 0;
    if (!id_only) err += row_close(logits.data(), ref, V, fmt::format("greedy step {}", i), tol);
    int32_t next = id_only ? dev : argmax(logits.data(), V);
    if (next != r.greedy[i]) {
      float max_ref = 0;
      for (int64_t j = 0; j < V; ++j) max_ref = std::max(max_ref, std::fabs(ref[j]));
      if (kv == DType::BF16 && ref[r.greedy[i]] - ref[next] <= tol * max_ref) break;  // a tie
      return err + fmt::format("greedy step {}: id {} != reference {}\n", i, next, r.greedy[i]);
    }
    if (i + 1 < N && i % 2 == 1) {
      dev = tf.forward_argmax(&next, 1, T + i);
    } else if (i + 1 < N) {  // the device's argmax of the step's logits beside them
      const CudaSeqStep st{
          .seq = 0, .ids = &next, .n = 1, .pos0 = T + i, .logits = logits.data(), .argmax = &dev};
      tf.forward_batch({&st, 1});
      if (dev != argmax(logits.data(), V))
        return err + fmt::format("greedy step {}: device argmax {} != host {}\n", i + 1, dev,
                                 argmax(logits.data(), V));
    }
  }
  if (mode == MoeMode::HYBRID && slots == Slots::MIN && tf.runtime_stats().cpu_experts == 0)
    err += "hybrid: no expert was computed on the CPU\n";
  return err;
}

// OFFLOAD decode with the slot bookkeeping in the router's last block and the miss copy in the
// experts' gate/up kernel (fused_fetch) against their own two kernels: the same logits bit for
// bit at every step of the prompt and the greedy continuation, and the same cache decisions.
std::string fused_fetch_same(const std::string& dir, Slots slots, bool graphs) {
  Reference r = load(dir);
  const int64_t T = static_cast<int64_t>(r.prompt.size()), V = r.model->config().vocab_size;
  const int64_t N = static_cast<int64_t>(r.greedy.size());
  Runner fused(*r.model, T + N, 64, slots), apart(*r.model, T + N, 64, slots);
  fused.tf->set_fused_fetch(true), apart.tf->set_fused_fetch(false);
  fused.tf->set_graphs(graphs), apart.tf->set_graphs(graphs);
  std::vector<float> a(V), b(V);
  int32_t next = 0;
  for (int64_t t = 0; t + 1 < T + N; ++t) {
    const int32_t id = t < T ? r.prompt[t] : next;
    fused.tf->forward(&id, 1, t, a.data(), false);
    apart.tf->forward(&id, 1, t, b.data(), false);
    for (int64_t i = 0; i < V; ++i)
      if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0)
        return fmt::format("position {}: logit {} fused {} vs apart {}\n", t, i, a[i], b[i]);
    next = argmax(a.data(), V);
  }
  const CudaRuntimeStats x = fused.tf->runtime_stats(), y = apart.tf->runtime_stats();
  if (x.hits != y.hits || x.misses != y.misses || x.fetched_experts != y.fetched_experts)
    return fmt::format("cache: fused {} hits {} misses {} fetched, apart {} {} {}\n", x.hits,
                       x.misses, x.fetched_experts, y.hits, y.misses, y.fetched_experts);
  if (slots == Slots::MIN && x.fetched_experts == 0) return "no expert was fetched\n";
  return "";
}

// forward_batch over three sequences: a mixed prefill pass (one whole prompt, one prefix), a
// decode-sized pass of one token each (the captured path, per-token positions), then a mixed
// pass of a long continuation and one token. Every logits row against the references.
std::string batch(const std::string& dir, Slots slots, MoeMode mode = MoeMode::OFFLOAD) {
  Reference r = load(dir);
  const int64_t T = static_cast<int64_t>(r.prompt.size()), V = r.model->config().vocab_size;
  if (T < 8) return fmt::format("batch: prompt of {} tokens is too short\n", T);
  Runner run(*r.model, T + 4, std::max<int64_t>(64, T + 3), slots, mode, 3);  // pass 1 whole
  CudaTransformer& tf = *run.tf;
  if (tf.max_seqs() != 3) return "batch: max_seqs\n";
  std::vector<float> a(V), b(V), c(V);
  const int32_t* p = r.prompt.data();
  std::string err;
  const CudaSeqStep pass1[] = {{.seq = 1, .ids = p, .n = T, .pos0 = 0, .logits = a.data()},
                               {.seq = 0, .ids = p, .n = 3, .pos0 = 0, .logits = b.data()}};
  tf.forward_batch(pass1);
  err += row_close(a.data(), r.prefill + (T - 1) * V, V, "batch pass 1 seq 1");
  err += row_close(b.data(), r.prefill + 2 * V, V, "batch pass 1 seq 0");
  // The same 3-token layout twice, the second time replaying the captured graph; every
  // sequence advances (a hybrid model's recurrent state cannot take a position twice).
  for (int rep = 0; rep < 2; ++rep) {
    const int32_t g = r.greedy[rep];
    const CudaSeqStep pass2[] = {
        {.seq = 0, .ids = p + 3 + rep, .n = 1, .pos0 = 3 + rep, .logits = a.data()},
        {.seq = 1, .ids = &g, .n = 1, .pos0 = T + rep, .logits = b.data()},
        {.seq = 2, .ids = p + rep, .n = 1, .pos0 = rep, .logits = c.data()}};
    tf.forward_batch(pass2);
    err += row_close(a.data(), r.prefill + (3 + rep) * V, V,
                     fmt::format("batch pass 2.{} seq 0", rep));
    err += row_close(b.data(), r.decode + (1 + rep) * V, V,
                     fmt::format("batch pass 2.{} seq 1", rep));
    err += row_close(c.data(), r.prefill + rep * V, V, fmt::format("batch pass 2.{} seq 2", rep));
  }
  const CudaSeqStep pass3[] = {{.seq = 2, .ids = p + 2, .n = 1, .pos0 = 2, .logits = c.data()},
                               {.seq = 0, .ids = p + 5, .n = T - 5, .pos0 = 5, .logits = a.data()}};
  tf.forward_batch(pass3);
  err += row_close(c.data(), r.prefill + 2 * V, V, "batch pass 3 seq 2");
  err += row_close(a.data(), r.prefill + (T - 1) * V, V, "batch pass 3 seq 0");
  // Bad input is refused with an error, not a crash.
  const CudaSeqStep twice[] = {{.seq = 0, .ids = p, .n = 1, .pos0 = 0, .logits = nullptr},
                               {.seq = 0, .ids = p, .n = 1, .pos0 = 1, .logits = nullptr}};
  try {
    tf.forward_batch(twice);
    err += "batch: a sequence twice in one pass was accepted\n";
  } catch (const Error&) {
  }
  return err;
}

// An agent's turns on one offloaded runner, with passes of at most 6 tokens through the slot
// cache (FT_EXTEND_TOKENS=6): the prompt's first 8 tokens streamed, 4 decode steps, 7 tokens
// streamed again (the experts cached by the decode steps come from their slots, not over PCIe),
// small extends of 5 and 6 tokens through the slot cache (no streaming), then decode to the
// end of the reference continuation. Every row of every pass against the reference.
std::string turns(const std::string& dir, Slots slots, MoeMode mode = MoeMode::OFFLOAD) {
  Reference r = load(dir);
  const int64_t T = static_cast<int64_t>(r.prompt.size()), V = r.model->config().vocab_size;
  std::vector<int32_t> seq = r.prompt;  // the prompt and the greedy continuation
  seq.insert(seq.end(), r.greedy.begin(), r.greedy.end() - 1);
  const int64_t S = static_cast<int64_t>(seq.size());
  if (S < 32) return fmt::format("turns: {} tokens are too few\n", S);
  auto ref = [&](int64_t p) { return p < T ? r.prefill + p * V : r.decode + (p - T + 1) * V; };
  ::setenv("FT_EXTEND_TOKENS", "6", 1);
  std::unique_ptr<Runner> run;
  try {
    run = std::make_unique<Runner>(*r.model, S, 64, slots, mode);
  } catch (...) {
    ::unsetenv("FT_EXTEND_TOKENS");
    throw;
  }
  ::unsetenv("FT_EXTEND_TOKENS");
  CudaTransformer& tf = *run->tf;
  std::vector<float> logits(8 * V);
  std::string err;
  std::vector<size_t> streamed;  // per pass
  int64_t pos = 0;
  auto pass = [&](int64_t n) {
    const size_t s0 = tf.runtime_stats().streamed_bytes;
    tf.forward(seq.data() + pos, n, pos, logits.data(), true);
    streamed.push_back(tf.runtime_stats().streamed_bytes - s0);
    for (int64_t i = 0; i < n; ++i)
      err += row_close(logits.data() + i * V, ref(pos + i), V,
                       fmt::format("turns: {}-token pass at {}, row {}", n, pos, i));
    pos += n;
  };
  for (int64_t n : {8, 1, 1, 1, 1, 7, 5, 6}) pass(n);
  while (pos < S) pass(1);
  if (streamed[0] == 0) err += "turns: the 8-token prompt was not streamed\n";
  if (streamed[6] != 0 || streamed[7] != 0)
    err += fmt::format("turns: the small extends streamed {} / {} bytes\n", streamed[6], streamed[7]);
  // MOST keeps a cache beyond the buffers: the second prompt moves fewer bytes over PCIe.
  if (slots == Slots::MOST && !(streamed[5] < streamed[0]))
    err += fmt::format("turns: the second prompt streamed {} bytes, the first {}\n", streamed[5],
                       streamed[0]);
  return err;
}

// A configuration CudaTransformer cannot run for a model (gpt-oss: HYBRID offload, a bf16 KV
// cache) is refused at construction with one line naming `needle`.
std::string refused(const std::string& dir, Slots s, MoeMode mode, DType kv,
                    const std::string& needle) {
  Reference r = load(dir);
  try {
    Runner run(*r.model, 64, 64, s, mode, 1, kv);
  } catch (const Error& e) {
    const std::string what = e.what();
    if (what.find(needle) == std::string::npos || what.find('\n') != std::string::npos)
      return "refusal: unexpected message: " + what + "\n";
    return "";
  }
  return "refusal: " + needle + " was accepted\n";
}
}  // namespace

// gpt_oss_mxfp4: gpt_oss with widths of whole 32-blocks and MXFP4 experts (*_blocks/_scales).
const std::vector<std::string>& fixture_names() {
  static const std::vector<std::string> names = {"qwen3_moe",   "qwen3_moe_yarn", "mixtral",
                                                  "olmoe",       "qwen3_5_moe",    "qwen3_next",
                                                  "gpt_oss",     "gpt_oss_mxfp4"};
  return names;
}

namespace {
// The reference is the dequantized model in f32, so quantized GEMVs keep f32 activations in a
// fixture's parity checks (int8 activations: mxfp4_int8_decode below).
Check f32_activations(Check c) {
  return {c.name, [run = c.run] {
            cuda::set_quant_gemv_int8(false);
            struct Restore {
              ~Restore() { cuda::set_quant_gemv_int8(true); }
            } restore;
            return run();
          }};
}

// The serving path of MXFP4 experts: decode GEMVs on int8 activations, token by token through
// the prompt and the greedy ids vs the f32 references. A row whose routing flips on a near-tie
// of this random fixture moves far (H200: worst row 0.44 of its range, 37/39 argmaxes), so the
// bounds are on the argmax (all but two rows) and the median row (0.05 of the range).
std::string mxfp4_int8_decode(const std::string& dir) {
  Reference r = load(dir);
  const int64_t T = static_cast<int64_t>(r.prompt.size()), V = r.model->config().vocab_size;
  const int64_t N = static_cast<int64_t>(r.greedy.size());
  CudaTransformer tf(*r.model, T + N, 64);
  std::vector<float> logits(V);
  std::vector<float> ratio;  // per row: max|d| / max|ref|
  int64_t same = 0;
  auto compare = [&](const float* ref) {
    float md = 0, mr = 0;
    for (int64_t i = 0; i < V; ++i)
      md = std::max(md, std::fabs(logits[i] - ref[i])), mr = std::max(mr, std::fabs(ref[i]));
    ratio.push_back(md / mr);
    same += argmax(logits.data(), V) == argmax(ref, V);
  };
  for (int64_t t = 0; t < T; ++t) {
    tf.forward(&r.prompt[t], 1, t, logits.data(), false);
    compare(r.prefill + t * V);
  }
  for (int64_t i = 0; i + 1 < N; ++i) {  // teacher-forced along the reference's greedy ids
    tf.forward(&r.greedy[i], 1, T + i, logits.data(), false);
    compare(r.decode + (i + 1) * V);
  }
  const auto rows = static_cast<int64_t>(ratio.size());
  std::sort(ratio.begin(), ratio.end());
  const float median = ratio[rows / 2], p90 = ratio[rows * 9 / 10], worst = ratio.back();
  std::fprintf(stderr,
               "  %s int8 decode: max|d|/max per row median %.2e, p90 %.2e, worst %.2e; argmax "
               "equal %lld/%lld\n",
               dir.c_str(), median, p90, worst, (long long)same, (long long)rows);
  if (median <= 0.05f && same >= rows - 2) return "";
  return fmt::format("int8 decode: median row max|d|/max {} (bound 0.05), argmax equal {}/{}\n",
                     median, same, rows);
}

// The checks of fixture f (model_checks adds the MXFP4 fixture's activation setting).
void model_checks_of(const std::string& fixtures_dir, const std::string& f,
                     std::vector<Check>& out) {
  {
    const std::string dir = fixtures_dir + "/" + f;
    out.push_back({f + "/prefill", [dir] { return prefill(dir, 64); }});
    out.push_back({f + "/prefill_chunked", [dir] { return prefill(dir, 7); }});
    out.push_back({f + "/decode_greedy", [dir] { return decode(dir); }});
    const std::pair<Slots, const char*> sizes[] = {
        {Slots::MIN, "min"}, {Slots::DOUBLE, "double"}, {Slots::HALF, "half"}, {Slots::ALL, "all"}};
    for (auto [s, name] : sizes) {
      const std::string p = f + "/offload_" + name;
      out.push_back({p + "/prefill", [dir, s] { return prefill(dir, 64, s); }});
      out.push_back({p + "/prefill_chunked", [dir, s] { return prefill(dir, 7, s); }});
      out.push_back({p + "/decode_greedy", [dir, s] { return decode(dir, s); }});
    }
    out.push_back({f + "/decode_greedy_eager", [dir] { return decode(dir, Slots::RESIDENT, false); }});
    for (auto [s, name] : {std::pair{Slots::MIN, "min"}, std::pair{Slots::HALF, "half"}})
      for (bool g : {true, false})
        out.push_back({fmt::format("{}/offload_{}/fused_fetch_same{}", f, name, g ? "" : "_eager"),
                       [dir, s, g] { return fused_fetch_same(dir, s, g); }});
    out.push_back({f + "/offload_min/decode_greedy_eager",
                   [dir] { return decode(dir, Slots::MIN, false); }});
    // gpt-oss (expert biases, clamped SwiGLU): HYBRID's CPU share lacks them, so it refuses.
    const bool refuses_hybrid = f.rfind("gpt_oss", 0) == 0;
    if (refuses_hybrid)
      out.push_back({f + "/offload_min/hybrid_refused", [dir] {
                       return refused(dir, Slots::MIN, MoeMode::HYBRID, DType::F32, "HYBRID");
                     }});
    for (auto [s, name] : {std::pair{Slots::MIN, "min"}, std::pair{Slots::HALF, "half"}})
      if (!refuses_hybrid)
        out.push_back({f + "/offload_" + name + "/hybrid_decode_greedy",
                       [dir, s] { return decode(dir, s, false, MoeMode::HYBRID); }});
    // HYBRID's device bookkeeping and CPU hand-off replayed from a captured graph.
    if (!refuses_hybrid)
      out.push_back({f + "/offload_min/hybrid_decode_greedy_graphs",
                     [dir] { return decode(dir, Slots::MIN, true, MoeMode::HYBRID); }});
    out.push_back({f + "/batch", [dir] { return batch(dir, Slots::RESIDENT); }});
    // BF16 KV cache (serving's): flash prefill / flash-decoding kernels, looser tolerance.
    const DType bf = DType::BF16;
    out.push_back({f + "/bf16_kv/prefill", [=] { return prefill(dir, 64, Slots::RESIDENT, bf); }});
    out.push_back({f + "/bf16_kv/prefill_chunked", [=] { return prefill(dir, 7, Slots::MIN, bf); }});
    out.push_back({f + "/bf16_kv/decode_greedy",
                   [=] { return decode(dir, Slots::RESIDENT, true, MoeMode::OFFLOAD, bf, 2000); }});
    out.push_back({f + "/bf16_kv/offload_min/decode_greedy_eager",
                   [=] { return decode(dir, Slots::MIN, false, MoeMode::OFFLOAD, bf); }});
    out.push_back({f + "/offload_min/batch", [dir] { return batch(dir, Slots::MIN); }});
    out.push_back({f + "/offload_min/turns", [dir] { return turns(dir, Slots::MIN); }});
    out.push_back({f + "/offload_most/turns", [dir] { return turns(dir, Slots::MOST); }});
    if (!refuses_hybrid)
      out.push_back({f + "/offload_most/hybrid_turns",
                     [dir] { return turns(dir, Slots::MOST, MoeMode::HYBRID); }});
    if (!refuses_hybrid)
      out.push_back({f + "/offload_min/hybrid_batch",
                     [dir] { return batch(dir, Slots::MIN, MoeMode::HYBRID); }});
  }
}
}  // namespace

std::vector<Check> model_checks(const std::string& fixtures_dir) {
  std::vector<Check> out;
  for (const std::string& f : fixture_names()) {
    const size_t first = out.size();
    model_checks_of(fixtures_dir, f, out);
    if (f == "gpt_oss_mxfp4") {
      for (size_t i = first; i < out.size(); ++i) out[i] = f32_activations(out[i]);
      const std::string dir = fixtures_dir + "/" + f;
      out.push_back({f + "/int8_decode", [dir] { return mxfp4_int8_decode(dir); }});
    }
  }
  return out;
}

double decode_tokens_per_s(const std::string& dir, int n_tokens) {
  Reference r = load(dir);
  const int64_t T = static_cast<int64_t>(r.prompt.size()), V = r.model->config().vocab_size;
  CudaTransformer tf(*r.model, T + n_tokens + 8, 64);
  std::vector<float> logits(V);
  tf.forward(r.prompt.data(), T, 0, logits.data(), false);
  int32_t next = argmax(logits.data(), V);
  for (int i = 0; i < 8; ++i) {  // warm-up (module load, cuBLAS heuristics)
    tf.forward(&next, 1, T + i, logits.data(), false);
    next = argmax(logits.data(), V);
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n_tokens; ++i) {
    tf.forward(&next, 1, T + 8 + i, logits.data(), false);
    next = argmax(logits.data(), V);
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return n_tokens / s;
}

}  // namespace ft::cuda_checks
