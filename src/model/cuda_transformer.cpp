// CudaTransformer: embed -> [attention block, FFN block] x layers -> norm -> lm_head on the GPU,
// mirroring model/transformer.cpp op for op. Small passes (decode) use fused ops and replay a
// captured CUDA graph; large passes (prefill) use cuBLAS and stream offloaded experts.
#include "model/cuda_transformer.h"

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <mutex>
#include <thread>

#include "backend/cpu/thread_pool.h"
#include "base/env.h"
#include "base/error.h"
#include "base/timer.h"
#include "experts/cpu_share.h"
#include "experts/gpu_expert_store.h"
#include "ops/ops.h"
#include "quant/quant.h"

namespace ft {

void rope_tables(const Rope& rope, int64_t max_pos, std::vector<float>& cos,
                 std::vector<float>& sin) {
  const auto& f = rope.inv_freq();
  const int64_t half = static_cast<int64_t>(f.size());
  cos.resize(max_pos * half);
  sin.resize(max_pos * half);
  for (int64_t p = 0; p < max_pos; ++p)
    for (int64_t i = 0; i < half; ++i) {
      const float angle = f[i] * static_cast<float>(p);
      cos[p * half + i] = std::cos(angle) * rope.attention_factor();
      sin[p * half + i] = std::sin(angle) * rope.attention_factor();
    }
}

namespace {
cuda::DeviceBuffer floats(int64_t count) { return cuda::DeviceBuffer(count * sizeof(float)); }

constexpr int64_t k_logit_rows = 64;  // lm_head runs on at most this many tokens at a time

// Bytes of every weight the transformer keeps resident (all but routed experts).
size_t resident_bytes(const ModelWeights& w) {
  // lm_head is uploaded on its own even when tied to the embedding.
  size_t b = w.embed.nbytes() + w.lm_head.nbytes() + w.final_norm.size() * sizeof(float);
  for (const auto& L : w.layers) {
    for (const Linear* l : {&L.q, &L.k, &L.v, &L.o}) b += l->w.nbytes() + l->bias.size() * 4;
    for (const TensorView* t : {&L.gate, &L.up, &L.down, &L.router}) b += t->nbytes();
    for (const auto* v : {&L.attn_norm, &L.ffn_norm, &L.q_norm, &L.k_norm}) b += v->size() * 4;
    b += hybrid_resident_bytes(L);
  }
  return b;
}

// The L2 prefetch of a decode kernel: the matrices later launches read (null ones skipped),
// none when they would take more than half of the device's L2 (an RTX 3090's 6 MiB: the
// prefetch would evict itself). FT_L2_PREFETCH=0: none, for A/B runs.
cuda::L2Prefetch l2_prefetch(std::initializer_list<const cuda::DeviceMatrix*> ms) {
  static const bool on = env_on("FT_L2_PREFETCH");
  cuda::L2Prefetch p;
  if (!on) return p;
  for (const cuda::DeviceMatrix* m : ms) p.add(*m);
  int64_t total = 0;
  for (int i = 0; i < cuda::L2Prefetch::k_ranges; ++i) total += p.bytes[i];
  if (static_cast<size_t>(total) > cuda::l2_cache_bytes() / 2) return {};
  return p;
}
}  // namespace

int64_t extend_tokens(int64_t n_experts, int64_t top_k) {
  const int64_t k = std::max<int64_t>(top_k, 1), most = cuda::k_slot_max_ids / k;
  if (const char* v = std::getenv("FT_EXTEND_TOKENS"))
    return std::min<int64_t>(std::max(0, std::atoi(v)), most);
  return std::min(cuda::k_slot_max_ids, n_experts) / k;
}

MemoryRequest cuda_offload_request(const Model& model, const HostExperts& experts, int64_t capacity,
                                   int64_t max_chunk, size_t budget, int max_seqs,
                                   DType kv_dtype) {
  const ModelConfig& c = model.config();
  const int64_t T = max_chunk, H = c.hidden, I = experts.inter, k = c.top_k, f = 4;
  const int64_t widest = std::max({H, c.q_dim(), c.ffn_dim, I});
  const int64_t rot = c.head_dim;  // upper bound of the rotary width
  size_t scratch = T * 4 + f * T *
                               (3 * H + 2 * c.q_dim() + 2 * c.kv_dim() +
                                2 * std::max<int64_t>(c.ffn_dim, 1) + c.routed_experts() + 2 * k);
  scratch += f * std::min(T, k_logit_rows) * c.vocab_size;                      // logits
  scratch += 4 * cuda::k_gemv_max_tokens;                                        // argmax ids
  if (const int64_t vl = model.weights().lm_head.shape[0]; vl < c.vocab_size)  // vocab split
    scratch += f * std::min(T, k_logit_rows) * (c.vocab_size + 3 * vl);  // piece + gather
  scratch += 2 * T * widest * 2 + cuda::Blas::k_dequant_elems * f;              // Blas
  scratch += f * T * k * (2 * H + 2 * I) + 12 * T * k + 4 * (c.n_experts + 1);  // MoeWorkspace
  scratch += f * cuda::k_gemv_max_tokens * k * (2 * H + 2 * I) + 4 * cuda::k_slot_max_ids +
             4 * experts.moe_layers * c.n_experts;
  scratch += f * capacity * rot;  // cos/sin
  const size_t kv_f = kv_dtype == DType::BF16 ? 2 : 4;
  if (kv_dtype == DType::BF16)  // flash-decoding workspace (model/cuda_transformer_kv.cpp)
    scratch += f * cuda::attention_split_floats(cuda::k_gemv_max_tokens, c.n_heads, c.head_dim,
                                                cuda::attention_max_splits(capacity));
  scratch += hybrid_scratch_bytes(c, T, max_seqs);
  // Device expert-cache state (per expert id: slot + recency; per slot: id + usage).
  scratch += 24 * c.n_layers * c.n_experts + 12 * experts.moe_layers * c.n_experts;
  // cuBLAS workspaces and allocation rounding: measured ~10 MB beyond the terms above on an
  // H200 (bench offload reports the VRAM it used beside the budget); 160 MB of headroom.
  scratch += size_t{160} << 20;
  return {.budget = budget,
          .resident_weights = resident_bytes(model.weights()),
          .scratch = scratch,
          .kv_bytes_per_token = static_cast<size_t>(2 * attention_layers(c) * c.kv_dim()) * kv_f,
          .kv_reserve_tokens = capacity * std::max(1, max_seqs),
          .expert_bytes = experts.expert_bytes(),
          .moe_layers = experts.moe_layers,
          .experts = experts.n_experts};
}

// HYBRID: a worker thread running one CPU expert job at a time on a thread pool, and the host
// copies of a layer's inputs.
struct CudaTransformer::Hybrid {
  explicit Hybrid(int threads) : pool(threads, false) {
    worker = std::thread([this] {
      std::unique_lock<std::mutex> lock(m);
      for (;;) {
        cv.wait(lock, [&] { return quit || static_cast<bool>(job); });
        if (quit) return;
        auto j = std::move(job);
        job = nullptr;
        lock.unlock();
        j();
        lock.lock();
        busy = false;
        cv.notify_all();
      }
    });
  }
  ~Hybrid() {
    {
      std::lock_guard<std::mutex> lock(m);
      quit = true;
    }
    cv.notify_all();
    worker.join();
  }
  void post(std::function<void()> f) {
    std::lock_guard<std::mutex> lock(m);
    job = std::move(f);
    busy = true;
    cv.notify_all();
  }
  void wait() {
    std::unique_lock<std::mutex> lock(m);
    cv.wait(lock, [&] { return !busy; });
  }

  ThreadPool pool;
  std::thread worker;
  std::mutex m;
  std::condition_variable cv;
  std::function<void()> job;
  bool busy = false, quit = false;
  std::vector<float> x, w, out;  // [n, H], [n, k], [n, H]
  std::vector<int32_t> cpu_ids;  // [n, k]: the expert ids of routes computed on the CPU, else -1
  CpuRouteScratch scratch;
  // This rank's routed slots (all but a whole-expert shard's -1 ids): their index in the
  // layer's [n, top_k], expert ids and cache slots.
  std::vector<int64_t> own_at;
  std::vector<int32_t> own_ids, own_slots;
};

CudaTransformer::~CudaTransformer() = default;

CudaTransformer::CudaTransformer(const Model& model, int64_t capacity, int64_t max_chunk,
                                 const CudaOffload& offload, int max_seqs, DType kv_dtype)
    : kv_dtype_(kv_dtype),
      model_(model),
      c_(model.config()),
      capacity_(capacity),
      max_chunk_(max_chunk),
      max_seqs_(max_seqs),
      rope_(c_.rope, c_.head_dim) {
  FT_CHECK(capacity > 0 && max_chunk > 0 && max_seqs > 0, "CudaTransformer: bad sizes");
  if (cuda::device_count() == 0) fail("no CUDA device: run on the CPU backend instead");
  const auto& w = model.weights();
  const HostExperts* host = offload.experts;
  if (!c_.plain_swiglu_experts() && host && offload.mode == MoeMode::HYBRID)
    fail("{}: HYBRID offload does not run expert biases or the clamped SwiGLU on its CPU share "
         "(gpt-oss); use --moe-backend offload", c_.model_type);
  if (host) {
    FT_CHECK(host->n_layers == c_.n_layers && host->n_experts == c_.n_experts &&
                 host->hidden == c_.hidden,
             "offload: host experts do not match the model");
    for (int64_t l = 0; l < c_.n_layers; ++l)
      FT_CHECK(host->has_layer(l) == bool(c_.layer_is_moe[l]), "offload: layer {}", l);
  }
  mode_ = offload.mode;
  fused_fetch_on_ = env_on("FT_FUSED_FETCH");
  hybrid_f_ = offload.pcie_Bps / std::max(1.0, offload.pcie_Bps + offload.cpu_Bps);
  const int64_t inter = host ? host->inter : c_.expert_dim;
  embed_ = upload(w.embed);
  lm_head_ = upload(w.lm_head);
  final_norm_ = upload(w.final_norm);
  for (const auto& L : w.layers) {
    Layer d{};
    d.attn_norm = upload(L.attn_norm);
    d.ffn_norm = upload(L.ffn_norm);
    d.q_norm = upload(L.q_norm);
    d.k_norm = upload(L.k_norm);
    d.q = upload(L.q.w), d.k = upload(L.k.w), d.v = upload(L.v.w), d.o = upload(L.o.w);
    d.q_bias = upload(L.q.bias), d.k_bias = upload(L.k.bias), d.v_bias = upload(L.v.bias);
    d.o_bias = upload(L.o.bias);
    if (!L.gate.empty()) d.gate = upload(L.gate), d.up = upload(L.up), d.down = upload(L.down);
    d.sinks = upload(L.sinks);  // gpt-oss (null when empty)
    d.router_bias = upload(L.router_bias);
    d.gate_bias = upload(L.expert_gate_bias), d.up_bias = upload(L.expert_up_bias);
    d.down_bias = upload(L.expert_down_bias);
    if (!L.router.empty()) {
      d.router = upload(L.router);
      if (!host) d.experts = upload_experts(L.experts);
    }
    layers_.push_back(d);
    upload_hybrid(L);
  }
  const int64_t T = max_chunk, H = c_.hidden, kvd = c_.kv_dim();
  const int64_t widest = std::max({H, c_.q_dim(), c_.ffn_dim, inter, c_.delta.value_dim(),
                                   c_.shared_expert_dim});
  blas_ = std::make_unique<cuda::Blas>(T, widest);
  if (c_.n_experts > 0)
    moe_ = std::make_unique<cuda::MoeWorkspace>(T, c_.top_k, c_.n_experts, H, inter);
  hybrid_q16_ = hybrid_q16(hybrid_f_);
  const bool share = mode_ == MoeMode::HYBRID && !hybrid_on_host();
  if (host) {
    const bool device_cache = mode_ == MoeMode::OFFLOAD || share;
    store_ = std::make_unique<GpuExpertStore>(*host, offload.slots, device_cache);
    // Small extends through the slot cache need its device bookkeeping (one ensure of up to
    // k_slot_max_ids routes per layer).
    if (device_cache)
      slot_tokens_ = std::max(cuda::k_gemv_max_tokens,
                              std::min(extend_tokens(c_.n_experts, c_.top_k), T));
    if (!store_->all_resident())
      moe_pool_ = std::make_unique<cuda::MoeWorkspace>(cuda::k_gemv_max_tokens, c_.top_k,
                                                       offload.slots, H, inter);
    slot_ids_ = cuda::DeviceBuffer(slot_tokens_ * c_.top_k * sizeof(int32_t));
    if (!store_->all_resident() && mode_ == MoeMode::HYBRID) {
      const int threads =
          offload.cpu_threads > 0
              ? offload.cpu_threads
              : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
      if (share) {
        share_ = std::make_unique<CpuShare>(*host, c_.top_k, cuda::k_gemv_max_tokens, threads);
        set_admissions();
      } else {
        capturable_ = false;
        hybrid_ = std::make_unique<Hybrid>(threads);
      }
    }
  }
  alloc_hybrid(T);
  FT_CHECK(kv_dtype == DType::F32 || kv_dtype == DType::BF16, "KV cache dtype {}",
           dtype_name(kv_dtype));
  seq_stride_ = attention_layers(c_) * capacity * kvd;
  kv_k_ = cuda::DeviceBuffer(max_seqs * seq_stride_ * kv_elem_bytes());
  kv_v_ = cuda::DeviceBuffer(max_seqs * seq_stride_ * kv_elem_bytes());
  alloc_attention_split();
  std::vector<float> cs, sn;
  rope_tables(rope_, capacity, cs, sn);
  cos_ = floats(static_cast<int64_t>(cs.size()));
  sin_ = floats(static_cast<int64_t>(sn.size()));
  cos_.upload(cs.data(), cs.size() * sizeof(float));
  sin_.upload(sn.data(), sn.size() * sizeof(float));
  ids_ = cuda::DeviceBuffer(T * sizeof(int32_t));
  pos_ = cuda::DeviceBuffer(T * sizeof(int32_t));
  seq_ = cuda::DeviceBuffer(T * sizeof(int32_t));
  staging_ = cuda::PinnedBuffer(3 * T * sizeof(int32_t));
  x_ = floats(T * H), xn_ = floats(T * H), tmp_ = floats(T * H);
  q_ = floats(T * c_.q_dim()), att_ = floats(T * c_.q_dim());
  k_ = floats(T * kvd), v_ = floats(T * kvd);
  gate_ = floats(T * std::max<int64_t>(c_.ffn_dim, 1)),
  up_ = floats(T * std::max<int64_t>(c_.ffn_dim, 1));
  if (c_.n_experts > 0) {
    router_ = floats(T * c_.routed_experts());  // a whole-expert TP shard: every expert's score
    route_ids_ = cuda::DeviceBuffer(T * c_.top_k * sizeof(int32_t));
    route_w_ = floats(T * c_.top_k);
    route_counter_ = cuda::DeviceBuffer(sizeof(uint32_t));
    const uint32_t zero = 0;
    route_counter_.upload(&zero, sizeof(zero));
  }
  logit_rows_ = std::min(T, k_logit_rows);
  logits_ = floats(logit_rows_ * c_.vocab_size);
  logits_host_ = cuda::PinnedBuffer(std::min(T, cuda::k_gemv_max_tokens) * c_.vocab_size *
                                    sizeof(float));
  argmax_host_ = cuda::PinnedBuffer(cuda::k_gemv_max_tokens * sizeof(int32_t));
  argmax_ = cuda::DeviceBuffer(cuda::k_gemv_max_tokens * sizeof(int32_t));
}

cuda::DeviceMatrix CudaTransformer::upload(const TensorView& t) {
  if (t.empty()) return {};
  FT_CHECK(t.ndim == 2, "{}: expected a matrix, got {}", t.name, t.shape_str());
  cuda::DeviceBuffer& b = storage_.emplace_back(t.nbytes());
  b.upload(t.data, t.nbytes());
  weight_bytes_ += t.nbytes();
  cuda::DeviceMatrix m{.data = b.data(), .dtype = t.dtype, .rows = t.shape[0], .cols = t.shape[1]};
  // Quantized matrices stay quantized (cuda::matmul dispatches on the dtype); the scales a
  // block does not carry come along: FP8 tiles' scale_inv, NVFP4's global scale.
  if (t.dtype == DType::F8_E4M3_B128) {
    FT_CHECK(t.scale_inv, "{}: FP8_E4M3_B128 without scale_inv", t.name);
    const size_t sb = static_cast<size_t>(quant::fp8_b128_scale_count(m.rows, m.cols)) * sizeof(float);
    cuda::DeviceBuffer& s = storage_.emplace_back(sb);
    s.upload(t.scale_inv, sb);
    weight_bytes_ += sb;
    m.scale_inv = s.as<float>();
  }
  m.global_scale = t.global_scale;
  return m;
}

const float* CudaTransformer::upload(const std::vector<float>& v) {
  if (v.empty()) return nullptr;
  cuda::DeviceBuffer& b = storage_.emplace_back(v.size() * sizeof(float));
  b.upload(v.data(), v.size() * sizeof(float));
  weight_bytes_ += b.bytes();
  return b.as<float>();
}

// Stacks the experts of one layer: gate/up [E, I, H], down [E, H, I], each matrix in its own
// dtype (mixed GGUF quants) as one cuda::ExpertRecord per expert (FP8 tiles and NVFP4 global
// scales inside the records; NVFP4's also kept on the host for the prefill GEMMs).
cuda::DeviceExperts CudaTransformer::upload_experts(const std::vector<ExpertWeights>& experts) {
  FT_CHECK(!experts.empty(), "MoE layer without experts");
  const ExpertWeights& e0 = experts[0];
  cuda::DeviceExperts d{.dtype = e0.gate.dtype,
                        .n_experts = static_cast<int64_t>(experts.size()),
                        .hidden = e0.gate.shape[1],
                        .inter = e0.gate.shape[0]};
  auto stack = [&](int m) {
    auto of = [m](const ExpertWeights& e) -> const TensorView& {
      return m == 0 ? e.gate : m == 1 ? e.up : e.down;
    };
    const TensorView& t0 = of(experts[0]);
    FT_CHECK(t0.ndim == 2 && t0.shape[0] == d.rows(m) && t0.shape[1] == d.cols(m),
             "{}: expert matrix is {}, expected [{}, {}]", t0.name, t0.shape_str(), d.rows(m),
             d.cols(m));
    const cuda::ExpertRecord rec = cuda::expert_record(t0.dtype, d.rows(m), d.cols(m));
    std::vector<char> host(rec.bytes * experts.size(), 0);
    std::vector<float> gscale;
    for (size_t i = 0; i < experts.size(); ++i) {
      const TensorView& t = of(experts[i]);
      FT_CHECK(t.dtype == t0.dtype && t.nbytes() == rec.data,
               "{}: experts of one layer differ in dtype or shape", t.name);
      char* dst = host.data() + i * rec.bytes;
      std::memcpy(dst, t.data, rec.data);
      if (t.dtype == DType::F8_E4M3_B128) {
        FT_CHECK(t.scale_inv, "{}: FP8_E4M3_B128 without scale_inv", t.name);
        std::memcpy(dst + rec.scale_offset, t.scale_inv,
                    quant::fp8_b128_scale_count(t.shape[0], t.shape[1]) * sizeof(float));
      }
      if (t.dtype == DType::NVFP4) {
        std::memcpy(dst + rec.scale_offset, &t.global_scale, sizeof(float));
        gscale.push_back(t.global_scale);
      }
    }
    cuda::DeviceBuffer& b = storage_.emplace_back(host.size());
    b.upload(host.data(), host.size());
    weight_bytes_ += b.bytes();
    d.types[m] = t0.dtype;
    if (!gscale.empty()) d.host_gscale[m] = host_scales_.emplace_back(std::move(gscale)).data();
    return static_cast<const void*>(b.data());
  };
  d.gate = stack(0);
  d.up = stack(1);
  d.down = stack(2);
  return d;
}

CudaRuntimeStats CudaTransformer::runtime_stats() const {
  CudaRuntimeStats s = rt_;
  if (store_) {
    const ExpertCacheStats c = store_->cache_stats();
    const ExpertStoreStats e = store_->stats();
    // rt_ holds the counts of slot pools retired by resize_expert_slots.
    s.hits = rt_.hits + c.hits, s.misses = rt_.misses + c.misses;
    s.probation = rt_.probation + c.probation;
    s.fetched_experts = rt_.fetched_experts + e.fetched_experts;
    s.fetched_bytes = rt_.fetched_bytes + e.fetched_bytes;
    s.streamed_bytes = rt_.streamed_bytes + e.streamed_bytes;
  }
  if (share_) s.cpu_experts += share_->cpu_experts(), s.t_cpu += share_->cpu_seconds();
  return s;
}

void CudaTransformer::forward(const int32_t* ids, int64_t n, int64_t pos0, float* logits,
                              bool all_logits) {
  forward_seq0(ids, n, pos0, logits, all_logits, nullptr);
}

int32_t CudaTransformer::forward_argmax(const int32_t* ids, int64_t n, int64_t pos0) {
  int32_t id = 0;
  forward_seq0(ids, n, pos0, nullptr, false, &id);
  return id;
}

void CudaTransformer::forward_seq0(const int32_t* ids, int64_t n, int64_t pos0, float* logits,
                                   bool all_logits, int32_t* argmax) {
  if (n <= 0) fail("forward: no tokens");
  if (pos0 < 0 || pos0 + n > capacity_)
    fail("sequence of {} tokens exceeds the context size {}", pos0 + n, capacity_);
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= c_.vocab_size)
      fail("token id {} is out of range [0, {})", ids[i], c_.vocab_size);
  ++rt_.steps;
  for (int64_t s = 0; s < n; s += max_chunk_) {
    const int64_t m = std::min(max_chunk_, n - s);
    const bool last = s + m == n;
    const CudaSeqStep step{.seq = 0,
                           .ids = ids + s,
                           .n = m,
                           .pos0 = pos0 + s,
                           .logits = !all_logits && last ? logits : nullptr,
                           .argmax = last ? argmax : nullptr};
    pass({&step, 1}, m, all_logits ? logits + s * c_.vocab_size : nullptr);
  }
}

int64_t check_steps(std::span<const CudaSeqStep> steps, int max_seqs, int64_t capacity,
                    int64_t max_chunk, int64_t vocab) {
  if (steps.empty()) fail("forward_batch: no steps");
  int64_t total = 0;
  std::vector<char> seen(max_seqs, 0);
  for (const CudaSeqStep& st : steps) {
    if (st.seq < 0 || st.seq >= max_seqs)
      fail("sequence {} is out of range [0, {})", st.seq, max_seqs);
    if (seen[st.seq]) fail("sequence {} appears twice in one batch", st.seq);
    seen[st.seq] = 1;
    if (st.n <= 0) fail("forward_batch: sequence {} has no tokens", st.seq);
    if (st.pos0 < 0 || st.pos0 + st.n > capacity)
      fail("sequence of {} tokens exceeds the context size {}", st.pos0 + st.n, capacity);
    for (int64_t i = 0; i < st.n; ++i)
      if (st.ids[i] < 0 || st.ids[i] >= vocab)
        fail("token id {} is out of range [0, {})", st.ids[i], vocab);
    total += st.n;
  }
  if (total > max_chunk) fail("forward_batch: {} tokens exceed the pass size {}", total, max_chunk);
  return total;
}

void CudaTransformer::forward_batch(std::span<const CudaSeqStep> steps) {
  const int64_t total = check_steps(steps, max_seqs_, capacity_, max_chunk_, c_.vocab_size);
  ++rt_.steps;
  pass(steps, total, nullptr);
}

void CudaTransformer::pass(std::span<const CudaSeqStep> steps, int64_t n, float* logits_all) {
  cuda::StreamScope scope(stream_);
  const int64_t H = c_.hidden, V = c_.vocab_size, T = max_chunk_;
  cuda::stream_synchronize();  // the previous pass no longer reads the staging buffer
  begin_recurrent(steps);
  auto* st = static_cast<int32_t*>(staging_.data());
  int64_t t = 0;
  for (const CudaSeqStep& s : steps)
    for (int64_t i = 0; i < s.n; ++i, ++t) {
      st[t] = s.ids[i];
      st[T + t] = static_cast<int32_t>(s.pos0 + i);
      st[2 * T + t] = s.seq;
    }
  cuda::copy_to_device_async(ids_.data(), st, n * sizeof(int32_t));
  cuda::copy_to_device_async(pos_.data(), st + T, n * sizeof(int32_t));
  cuda::copy_to_device_async(seq_.data(), st + 2 * T, n * sizeof(int32_t));
  float* x = x_.as<float>();
  float* xn = xn_.as<float>();
  float* lg = logits_.as<float>();
  if (n <= cuda::k_gemv_max_tokens) {
    // A sampled pass runs eagerly with the time-split events (graph replays time nothing).
    const bool timed = sampler_.next();
    if (graphs_on_ && capturable_ && !timed && mark_at_.empty()) {  // captures: eager
      auto& g = graphs_[n];
      if (!g) {  // kept only once instantiated: a pass that throws leaves no half graph
        auto fresh = std::make_unique<cuda::Graph>();
        fresh->capture_begin();
        run_layers(steps, n);
        all_logits(n);
        fresh->capture_end();
        g = std::move(fresh);
      }
      g->launch();
    } else {
      timing_begin(timed ? sampler_.weight() : 0);
      run_layers(steps, n);
      all_logits(n);
    }
    // Greedy steps read back their argmax ids; the logits come back only when asked for.
    bool want_logits = logits_all != nullptr, want_ids = false;
    for (const CudaSeqStep& s : steps)
      want_logits = want_logits || s.logits, want_ids = want_ids || s.argmax;
    if (want_ids) {
      cuda::argmax_rows(lg, n, V, argmax_.as<int32_t>());
      cuda::copy_to_host(argmax_host_.data(), argmax_.data(), n * sizeof(int32_t));
    }
    auto* host = static_cast<float*>(logits_host_.data());
    if (want_logits) cuda::copy_to_host(host, lg, n * V * sizeof(float));
    if (logits_all) std::memcpy(logits_all, host, n * V * sizeof(float));
    int64_t off = 0;
    for (const CudaSeqStep& s : steps) {
      off += s.n;
      if (s.logits) std::memcpy(s.logits, host + (off - 1) * V, V * sizeof(float));
      if (s.argmax) *s.argmax = static_cast<const int32_t*>(argmax_host_.data())[off - 1];
    }
    timing_end();
    if (share_) share_->check();  // the CPU share answered every layer
    return;
  }
  timing_begin(1);  // prefill: every pass timed
  run_layers(steps, n);
  timing_end();
  if (logits_all) {
    cuda::rmsnorm(x, n, H, final_norm_, c_.rms_eps, xn);
    for (int64_t r = 0; r < n; r += logit_rows_) {
      const int64_t rows = std::min(logit_rows_, n - r);
      lm_head_rows(xn + r * H, rows, lg);
      cuda::copy_to_host(logits_all + r * V, lg, rows * V * sizeof(float));
    }
  }
  int64_t off = 0;
  for (const CudaSeqStep& s : steps) {
    off += s.n;
    if (!s.logits && !s.argmax) continue;
    cuda::rmsnorm(x + (off - 1) * H, 1, H, final_norm_, c_.rms_eps, xn);
    lm_head_rows(xn, 1, lg);
    if (s.logits) cuda::copy_to_host(s.logits, lg, V * sizeof(float));
    if (s.argmax) {
      cuda::argmax_rows(lg, 1, V, argmax_.as<int32_t>());
      cuda::copy_to_host(s.argmax, argmax_.data(), sizeof(int32_t));
    }
  }
}

void CudaTransformer::all_logits(int64_t n) {
  cuda::rmsnorm(x_.as<float>(), n, c_.hidden, final_norm_, c_.rms_eps, xn_.as<float>());
  lm_head_rows(xn_.as<float>(), n, logits_.as<float>());
}

void CudaTransformer::run_layers(std::span<const CudaSeqStep> steps, int64_t n) {
  cuda::embed(embed_, ids_.as<int32_t>(), n, x_.as<float>());
  // Offloaded prefill streams every MoE layer's experts (the next layer's copy overlaps this
  // layer's compute); decode-sized passes and small extends go through the slot cache instead.
  streaming_ = store_ && !store_->all_resident() && n > slot_tokens_;
  if (streaming_) {
    std::vector<int64_t> order;
    for (int64_t l = 0; l < c_.n_layers; ++l)
      if (c_.layer_is_moe[l]) order.push_back(l);
    store_->stream_begin(order);
  }
  for (int64_t l = 0; l < c_.n_layers; ++l) {
    mark(StepPhase::ATTENTION);  // the token mixer: attention or DeltaNet
    if (c_.is_delta(l))
      delta_net_block(l, n);
    else
      attention_block(l, steps, n);
    tp_reduce(n);  // tensor parallel: sum the block's partials (no-op on one GPU)
    ffn_block(l, n);
    tp_reduce(n);
  }
  join_admissions();
}

void CudaTransformer::attention_block(int64_t l, std::span<const CudaSeqStep> steps, int64_t n) {
  const Layer& L = layers_[l];
  const int64_t H = c_.hidden, qd = c_.q_dim(), kvd = c_.kv_dim(), hd = c_.head_dim;
  const bool small = n <= cuda::k_gemv_max_tokens;
  float *x = x_.as<float>(), *xn = xn_.as<float>(), *q = q_.as<float>(), *k = k_.as<float>(),
        *v = v_.as<float>(), *att = att_.as<float>();
  float* qg = c_.attn_output_gate ? qg_.as<float>() : nullptr;  // [n, heads, query | gate]
  if (small) {  // attention norm fused into the q/k/v GEMVs
    const cuda::GemvOut qkv[3] = {{.w = L.q, .y = qg ? qg : q, .bias = L.q_bias},
                                  {.w = L.k, .y = k, .bias = L.k_bias},
                                  {.w = L.v, .y = v, .bias = L.v_bias}};
    const cuda::GemvNorm norm{.w = L.attn_norm, .eps = c_.rms_eps, .x_out = xn};
    cuda::gemv_multi(x, n, qkv, 3, &norm);
  } else {
    cuda::rmsnorm(x, n, H, L.attn_norm, c_.rms_eps, xn);
    cuda::matmul(*blas_, xn, n, L.q, qg ? qg : q, L.q_bias);
    cuda::matmul(*blas_, xn, n, L.k, k, L.k_bias);
    cuda::matmul(*blas_, xn, n, L.v, v, L.v_bias);
  }
  if (qg) cuda::split_q_gate(qg, n, c_.n_heads, hd, q);
  if (c_.qk_norm == QkNorm::FULL && tp_) {
    tp_qk_norm(L.q_norm, L.k_norm, n);
  } else if (c_.qk_norm == QkNorm::FULL) {
    cuda::rmsnorm(q, n, qd, L.q_norm, c_.rms_eps, q);
    cuda::rmsnorm(k, n, kvd, L.k_norm, c_.rms_eps, k);
  }
  if (c_.clip_qkv > 0) {
    cuda::clamp(q, n * qd, c_.clip_qkv);
    cuda::clamp(k, n * kvd, c_.clip_qkv);
    cuda::clamp(v, n * kvd, c_.clip_qkv);
  }
  const bool per_head = c_.qk_norm == QkNorm::PER_HEAD;
  const cuda::QkRopeArgs rope{.q = q,
                              .k = k,
                              .v = v,
                              .n = n,
                              .n_heads = c_.n_heads,
                              .n_kv_heads = c_.n_kv_heads,
                              .head_dim = hd,
                              .rot_dim = static_cast<int64_t>(rope_.inv_freq().size()) * 2,
                              .interleaved = c_.rope.interleaved,
                              .cos = cos_.as<float>(),
                              .sin = sin_.as<float>(),
                              .q_norm = per_head ? L.q_norm : nullptr,
                              .k_norm = per_head ? L.k_norm : nullptr,
                              .eps = c_.rms_eps,
                              .pos = pos_.as<int32_t>(),
                              .seq = seq_.as<int32_t>(),
                              .seq_stride = seq_stride_,
                              .k_cache = k_cache(0, l),
                              .v_cache = v_cache(0, l),
                              .kv_dtype = kv_dtype_};
  // Decode-sized passes: the attention kernel does qk_rope_store's work itself (one launch
  // fewer per layer; a pass's tokens of one sequence are consecutive at consecutive positions,
  // as the kernel needs). FT_FUSED_ROPE=0: the two launches, for A/B runs.
  static const bool fuse_env = env_on("FT_FUSED_ROPE");
  const bool fused = small && fuse_env;
  if (!fused) cuda::qk_rope_store(rope);
  const float scale = 1.f / std::sqrt(static_cast<float>(hd));
  if (small) {
    cuda::attention({.q = q,
                     .n_tokens = n,
                     .pos0 = 0,
                     .k_cache = k_cache(0, l),
                     .v_cache = v_cache(0, l),
                     .n_heads = c_.n_heads,
                     .n_kv_heads = c_.n_kv_heads,
                     .head_dim = hd,
                     .scale = scale,
                     .out = att,
                     .kernel = cuda::AttentionKernel::PER_TOKEN,
                     .pos = pos_.as<int32_t>(),
                     .seq = seq_.as<int32_t>(),
                     .seq_stride = seq_stride_,
                     .kv_dtype = kv_dtype_,
                     .split = attention_split(),
                     .sinks = L.sinks,
                     .window = c_.window(l),
                     .rope = fused ? cuda::attention_rope(rope) : cuda::AttentionRope{},
                     .next = l2_prefetch({&L.o, &L.router})});
    if (qg) cuda::attn_output_gate(att, qg, n, c_.n_heads, hd);
    tp_zero_residual(n);  // tensor parallel: ranks > 0 add only their partial
    const cuda::GemvOut o{.w = L.o, .y = x, .bias = L.o_bias, .accumulate = true};
    cuda::gemv_multi(att, n, &o, 1);
    return;
  }
  int64_t off = 0;
  for (const CudaSeqStep& s : steps) {
    cuda::attention({.q = q + off * qd,
                     .n_tokens = s.n,
                     .pos0 = s.pos0,
                     .k_cache = k_cache(s.seq, l),
                     .v_cache = v_cache(s.seq, l),
                     .n_heads = c_.n_heads,
                     .n_kv_heads = c_.n_kv_heads,
                     .head_dim = hd,
                     .scale = scale,
                     .out = att + off * qd,
                     .kv_dtype = kv_dtype_,
                     .sinks = L.sinks,
                     .window = c_.window(l)});
    off += s.n;
  }
  if (qg) cuda::attn_output_gate(att, qg, n, c_.n_heads, hd);
  cuda::matmul(*blas_, att, n, L.o, tmp_.as<float>(), L.o_bias);
  tp_zero_residual(n);
  cuda::add_inplace(x, tmp_.as<float>(), n * H);
}

void CudaTransformer::ffn_block(int64_t l, int64_t n) {
  const Layer& L = layers_[l];
  const int64_t H = c_.hidden;
  float *x = x_.as<float>(), *xn = xn_.as<float>(), *tmp = tmp_.as<float>();
  float *g = gate_.as<float>(), *u = up_.as<float>();
  const bool moe = c_.layer_is_moe[l];
  mark(moe ? StepPhase::ROUTING : StepPhase::HITS);  // a dense FFN counts as expert compute
  if (n <= cuda::k_gemv_max_tokens) {  // FFN norm fused into the router / gate+up GEMVs
    const cuda::GemvNorm norm{.w = L.ffn_norm, .eps = c_.rms_eps, .x_out = xn};
    if (moe) {
      const cuda::GemvOut r{.w = L.router, .y = router_.as<float>(), .bias = L.router_bias};
      cuda::GemvRoute route{.top_k = c_.top_k,
                            .renormalize = c_.norm_topk_prob,
                            .ids = route_ids_.as<int32_t>(),
                            .weights = route_w_.as<float>(),
                            .counter = route_counter_.as<uint32_t>(),
                            .local = route_local()};
      // OFFLOAD decode: the router's last block also runs the slot cache's bookkeeping, and
      // the experts' gate/up kernel copies the misses (no launch of their own). A timed pass
      // keeps them apart, so the time split still shows the fetch.
      const bool fused = fused_fetch(n);
      cuda::SlotEnsureArgs ensure;
      if (fused) {
        ensure = store_->ensure_args(l, route.ids, n * c_.top_k, slot_ids_.as<int32_t>());
        route.ensure = &ensure;
      }
      cuda::gemv_multi(x, n, &r, 1, &norm, &route);
      tp_zero_residual(n);
      moe_block(l, n, true, fused);  // adds into x
      return shared_expert(l, n);
    }
    const cuda::GemvOut gu[2] = {{.w = L.gate, .y = g}, {.w = L.up, .y = u}};
    cuda::gemv_multi(x, n, gu, 2, &norm);
    cuda::silu_mul(g, u, n * c_.ffn_dim, g);
    tp_zero_residual(n);
    const cuda::GemvOut d{.w = L.down, .y = x, .accumulate = true};
    cuda::gemv_multi(g, n, &d, 1);
    return;
  }
  cuda::rmsnorm(x, n, H, L.ffn_norm, c_.rms_eps, xn);
  tp_zero_residual(n);
  if (moe) {
    moe_block(l, n, false);  // adds into x
    return shared_expert(l, n);
  }
  cuda::matmul(*blas_, xn, n, L.gate, g);
  cuda::matmul(*blas_, xn, n, L.up, u);
  cuda::silu_mul(g, u, n * c_.ffn_dim, g);
  cuda::matmul(*blas_, g, n, L.down, tmp);
  cuda::add_inplace(x, tmp, n * H);
}

bool CudaTransformer::fused_fetch(int64_t n) const {
  // device_cache(): a slot cache smaller than the pool (never all resident).
  return fused_fetch_on_ && store_ && store_->device_cache() && !streaming_ && !share_ &&
         n <= cuda::k_gemv_max_tokens && timing_weight_ <= 0;
}

// Router -> top-k -> experts added into x_. Offloaded: all resident (a layer view of the pool),
// streaming (wait for the layer's copy, free its buffer after), decode through the device
// cache (bookkeeping and fetch kernels), or HYBRID (host bookkeeping, CPU share).
void CudaTransformer::moe_block(int64_t l, int64_t n, bool routed, bool ensured) {
  const Layer& L = layers_[l];
  int32_t* ids = route_ids_.as<int32_t>();
  if (!routed) {
    cuda::matmul(*blas_, xn_.as<float>(), n, L.router, router_.as<float>(), L.router_bias);
    cuda::route_topk_softmax(router_.as<float>(), n, c_.routed_experts(), c_.top_k,
                             c_.norm_topk_prob, ids, route_w_.as<float>(), route_local());
  }
  cuda::MoeArgs a{.x = xn_.as<float>(),
                  .n = n,
                  .ids = ids,
                  .weights = route_w_.as<float>(),
                  .top_k = c_.top_k,
                  .out = x_.as<float>(),
                  .accumulate = true};
  // gpt-oss: expert biases (by the routed ids: a.ids may become pool slots) and the clamped
  // SwiGLU; the launches copy it, so a local outlives them.
  const cuda::MoeOss oss{.expert_ids = ids,
                         .gate_bias = L.gate_bias,
                         .up_bias = L.up_bias,
                         .down_bias = L.down_bias,
                         .clamped = c_.expert_act.kind == ExpertActivation::Kind::SWIGLU_OAI,
                         .alpha = c_.expert_act.alpha,
                         .limit = c_.expert_act.limit};
  if (oss.gate_bias || oss.up_bias || oss.down_bias || oss.clamped) a.oss = &oss;
  if (!store_) {
    mark(StepPhase::HITS);
    cuda::moe_experts(*blas_, L.experts, a, *moe_);
  } else if (store_->all_resident()) {
    mark(StepPhase::HITS);
    cuda::moe_experts(*blas_, store_->resident(l), a, *moe_);
  } else if (streaming_) {
    mark(StepPhase::FETCH);  // waiting for the layer's streamed copy
    const cuda::DeviceExperts layer = store_->stream_acquire(l);
    mark(StepPhase::HITS);
    cuda::moe_experts(*blas_, layer, a, *moe_);
    store_->stream_release(l);
  } else if (share_ && n <= cuda::k_gemv_max_tokens) {
    moe_hybrid_device(l, n, a);
  } else if (store_->device_cache()) {  // OFFLOAD decode; small extends (HYBRID's too)
    // Device bookkeeping and miss copies: here, or (ensured) the bookkeeping ran in the
    // router's last block and the copy runs in the experts' first kernel.
    cuda::MoeFetch fetch;
    if (ensured) {
      fetch = store_->miss_fetch(l);
      a.fetch = &fetch;
    } else {
      mark(StepPhase::FETCH);
      store_->ensure_device(l, ids, n * c_.top_k, slot_ids_.as<int32_t>());
    }
    mark(StepPhase::HITS);
    // A small extend's tokens go in decode-sized pieces through the GEMV kernels over the
    // slots (a grouped GEMM would make a cuBLAS call per expert and matrix and sync the host
    // once per layer: 8 tokens of Qwen3-30B-A3B took ~1 ms per layer that way).
    const int64_t k = c_.top_k, H = c_.hidden;
    for (int64_t t0 = 0; t0 < n; t0 += cuda::k_gemv_max_tokens) {
      cuda::MoeArgs p = a;
      cuda::MoeOss oss;
      p.n = std::min(cuda::k_gemv_max_tokens, n - t0);
      p.x = a.x + t0 * H, p.out = a.out + t0 * H;
      p.ids = slot_ids_.as<int32_t>() + t0 * k, p.weights = a.weights + t0 * k;
      if (a.oss) {
        oss = *a.oss;
        oss.expert_ids += t0 * k;
        p.oss = &oss;
      }
      cuda::moe_experts(*blas_, store_->pool(l), p, *moe_pool_);
    }
  } else {
    mark(StepPhase::OTHER);  // host bookkeeping and the CPU share: host-timed t_fetch / t_cpu
    moe_hybrid(l, n, a);
  }
}

// HYBRID decode of one MoE layer: the routed ids come back; of the misses the q* share is
// fetched, the rest goes to the CPU job (started before the GPU work is issued); the GPU
// computes hits + fetched experts into x, then the CPU's partial sum is added.
void CudaTransformer::moe_hybrid(int64_t l, int64_t n, cuda::MoeArgs a) {
  Hybrid& hy = *hybrid_;
  const int64_t k = c_.top_k, count = n * k, H = c_.hidden;
  const HostExperts& host = *store_->host();
  const int64_t I = host.inter;
  Timer tf;
  host_ids_.resize(count);
  host_slots_.resize(count);
  hy.x.resize(n * H);
  hy.w.resize(count);
  // Synchronous: also guarantees no earlier kernel still reads a slot this step evicts.
  cuda::copy_to_host(host_ids_.data(), a.ids, count * sizeof(int32_t));
  cuda::copy_to_host(hy.x.data(), a.x, n * H * sizeof(float));
  cuda::copy_to_host(hy.w.data(), a.weights, count * sizeof(float));
  // A whole-expert TP shard routes other ranks' experts as -1 (route_local): they are neither
  // its misses nor its CPU share, and their slot stays -1 (the experts layer skips it).
  hy.own_at.clear(), hy.own_ids.clear();
  for (int64_t i = 0; i < count; ++i)
    if (host_ids_[i] >= 0) hy.own_at.push_back(i), hy.own_ids.push_back(host_ids_[i]);
  const int64_t own = static_cast<int64_t>(hy.own_ids.size());
  hy.own_slots.resize(own);
  const int64_t misses = store_->count_misses(l, hy.own_ids.data(), own);
  const int64_t fetch = hybrid_fetch_count(misses, hybrid_f_);
  const int64_t cpu =
      own > 0 ? store_->ensure(l, hy.own_ids.data(), own, hy.own_slots.data(), fetch) : 0;
  rt_.t_fetch += tf.seconds();
  std::fill(host_slots_.begin(), host_slots_.end(), -1);
  hy.cpu_ids.assign(count, -1);
  int64_t m = 0;  // routes computed on the CPU
  for (int64_t j = 0; j < own; ++j) {
    host_slots_[hy.own_at[j]] = hy.own_slots[j];
    if (hy.own_slots[j] < 0) hy.cpu_ids[hy.own_at[j]] = hy.own_ids[j], ++m;
  }
  if (m > 0) {
    rt_.cpu_experts += cpu;
    hy.out.assign(n * H, 0.f);
    hy.post([this, &hy, &host, l, count, k] {
      Timer tc;
      compute_cpu_routes(hy.pool, host, l, {hy.x.data(), hy.cpu_ids.data(), hy.w.data(), count, k},
                         hy.out.data(), hy.scratch);
      rt_.t_cpu += tc.seconds();
    });
  }
  cuda::copy_to_device(slot_ids_.data(), host_slots_.data(), count * sizeof(int32_t));
  a.ids = slot_ids_.as<int32_t>();
  mark(StepPhase::HITS);
  cuda::moe_experts(*blas_, store_->pool(l), a, *moe_pool_);
  mark(StepPhase::OTHER);
  if (m > 0) {
    hy.wait();
    cuda::copy_to_device(tmp_.data(), hy.out.data(), n * H * sizeof(float));
    cuda::add_inplace(x_.as<float>(), tmp_.as<float>(), n * H);
  }
}

// HYBRID decode of one MoE layer with the bookkeeping on the device: the ensure kernel splits
// the misses (the q* share fetched, the rest to the CPU's mailbox, whose coordinator starts at
// once), the fetch and the GPU's experts (CPU routes have slot -1) run meanwhile, then collect
// waits for the CPU's partial sum and adds it. No host round trip: graph-captured.
void CudaTransformer::moe_hybrid_device(int64_t l, int64_t n, cuda::MoeArgs a) {
  const cuda::HybridSplitArgs split{.fetch_q16 = static_cast<int32_t>(hybrid_q16_),
                                    .top_k = static_cast<int32_t>(c_.top_k),
                                    .x = a.x,
                                    .weights = a.weights,
                                    .share = share_->args(),
                                    .max_inflight = l <= admit_last_ ? admit_max_ : 0};
  mark(StepPhase::FETCH);  // bookkeeping, CPU hand-off, miss copies
  store_->ensure_device(l, a.ids, n * c_.top_k, slot_ids_.as<int32_t>(), &split);
  if (split.max_inflight > 0) {  // the admissions' copy beside this layer and the next ones
    cuda::record_on_default(admit_->fork);
    {
      cuda::StreamScope side(admit_->stream);
      cuda::wait_on_default(admit_->fork);
      store_->admit_device(l);
      cuda::record_on_default(admit_->join);
    }
    admit_->pending = true;
  }
  mark(StepPhase::HITS);
  a.ids = slot_ids_.as<int32_t>();
  cuda::moe_experts(*blas_, store_->pool(l), a, *moe_pool_);
  mark(StepPhase::OTHER);  // waiting for the CPU share beyond the GPU's own work
  cuda::cpu_share_collect(share_->args(), x_.as<float>());
}

// Admissions in every MoE layer but the last quarter's (at most 3: a late admission's copy
// would delay the pass's end), FT_HYBRID_ADMIT at once (default 2; 0: none).
void CudaTransformer::set_admissions() {
  std::vector<int64_t> moe;
  for (int64_t l = 0; l < c_.n_layers; ++l)
    if (c_.layer_is_moe[l]) moe.push_back(l);
  const int64_t tail = std::min<int64_t>(3, static_cast<int64_t>(moe.size()) / 4);
  admit_last_ = moe.empty() ? -1 : moe[moe.size() - 1 - tail];
  const char* v = std::getenv("FT_HYBRID_ADMIT");
  admit_max_ = v ? std::max(0, std::atoi(v)) : 2;
  if (admit_max_ > 0) admit_ = std::make_unique<Admit>();
}

// The pass's admissions are copied before it ends (the next pass may hit their slots).
void CudaTransformer::join_admissions() {
  if (!admit_ || !admit_->pending) return;
  cuda::wait_on_default(admit_->join);
  admit_->pending = false;
}

bool hybrid_on_host() {
  static const bool on = [] {
    const char* v = std::getenv("FT_HYBRID_HOST");
    return v && std::strcmp(v, "1") == 0;
  }();
  return on;
}

}  // namespace ft
