// The shared transformer forward (model/transformer.cpp) on one CUDA device: every weight of a
// loaded Model is uploaded to VRAM once; the KV caches of max_seqs sequences and all scratch
// are allocated at construction. Plain C++ over the backend/cuda entry points (no CUDA
// headers). In offload mode the routed experts stay in pinned host memory and VRAM holds a
// slot pool of them (experts/gpu_expert_store.h); everything else is resident as before.
// Decode-sized passes (<= cuda::k_gemv_max_tokens tokens) are captured once per token count in
// a CUDA graph and replayed (expert cache bookkeeping and miss fetches included, on the GPU).
#pragma once
#include <memory>
#include <span>
#include <vector>

#include "backend/cuda/cuda_ops.h"
#include "cache/memory_plan.h"
#include "model/model.h"
#include "model/rope.h"
#include "model/step_split.h"

namespace ft {

// cos/sin tables [max_pos, rot_dim / 2] computed exactly as Rope::apply does (float angle
// inv_freq[i] * pos, times the attention factor), so both backends rotate identically.
void rope_tables(const Rope& rope, int64_t max_pos, std::vector<float>& cos,
                 std::vector<float>& sin);

class HostExperts;
class GpuExpertStore;
class CpuShare;

// How decode treats expert cache misses. OFFLOAD: every miss is fetched over PCIe into a slot
// (bookkeeping and copy on the GPU, graph-captured). HYBRID: per MoE layer the misses are
// split by the q* rule (hybrid_fetch_count with f = pcie / (pcie + cpu)): some fetched, the
// rest computed by CPU workers from the pinned weights, launched first and overlapped with the
// GPU's work on hits; the partial sums are added. HYBRID's bookkeeping is on the device too
// (experts/cpu_share.h: the split and the CPU's job are handed over through mapped memory, so
// decode steps are graph-captured); FT_HYBRID_HOST=1 keeps it on the host (per-layer round
// trips, eager), for A/B runs.
enum class MoeMode { OFFLOAD, HYBRID };
bool hybrid_on_host();  // FT_HYBRID_HOST=1

// Offload mode: experts (not owned; outlive the transformer) and the VRAM slot count, in
// [n_experts, moe_layers * n_experts] (see plan_cuda_offload). The Model's own expert tensors
// are not read (a benchmark model may carry stand-ins).
struct CudaOffload {
  const HostExperts* experts = nullptr;
  int64_t slots = 0;
  MoeMode mode = MoeMode::OFFLOAD;
  double pcie_Bps = 25e9, cpu_Bps = 25e9;  // HYBRID split: measured bandwidths, bytes/s
  int cpu_threads = 0;                     // HYBRID CPU workers (0: all cores)
};

// One sequence's share of a forward_batch pass: n tokens ids[0..n) at positions pos0.. of
// sequence `seq` (its cache must hold 0..pos0-1). logits: host [vocab] for the last of the n
// tokens, or nullptr. marks: n_marks ascending positions in (pos0, pos0 + n) where a hybrid
// model's recurrent state is captured (capture_slots), numbered in pass order from 0.
// argmax: host, the last token's greedy id (as ft::argmax of its logits), found on the device
// so the logits row stays there (null: none; logits may be set as well).
struct CudaSeqStep {
  int seq;
  const int32_t* ids;
  int64_t n;
  int64_t pos0;
  float* logits;
  const int64_t* marks = nullptr;
  int32_t n_marks = 0;
  int32_t* argmax = nullptr;
};

// Cumulative runtime counters. Timings in seconds, best effort: t_attention / t_routing /
// t_hits / t_fetch are GPU times between timing events at phase boundaries of every prefill
// pass and of a sample of decode passes (model/step_split.h: graph replays time nothing, so one
// decode pass in split_every runs eagerly with the events and counts for split_every); HYBRID
// adds host-measured t_fetch (bookkeeping) and t_cpu (CPU expert time).
struct CudaRuntimeStats {
  int64_t steps = 0, hits = 0, misses = 0, fetched_experts = 0, cpu_experts = 0;
  int64_t probation = 0;  // fetches the slot cache inserted on probation (ExpertCache)
  size_t fetched_bytes = 0, streamed_bytes = 0;
  double t_attention = 0, t_routing = 0, t_hits = 0, t_fetch = 0, t_cpu = 0;
};

// What an offloaded CudaTransformer(model, capacity, max_chunk, offload, max_seqs) will
// allocate, as the planner's request: resident = every non-expert weight, scratch =
// activations, workspaces and rope tables, KV for max_seqs sequences of `capacity` tokens.
// plan_memory(request).expert_slots is the slot count for the budget; it throws ft::Error with
// the numbers when the budget cannot work.
// kv_dtype: the KV cache's element type, as the transformer's.
MemoryRequest cuda_offload_request(const Model& model, const HostExperts& experts, int64_t capacity,
                                   int64_t max_chunk, size_t budget, int max_seqs = 1,
                                   DType kv_dtype = DType::F32);

// Hybrid models' terms of that request (model/cuda_delta_net.cpp): a layer's DeltaNet and
// shared-expert weight bytes, the recurrent state of max_seqs sequences plus the DeltaNet and
// gated-attention scratch, and the number of attention layers (only they keep K/V).
size_t hybrid_resident_bytes(const LayerWeights& L);
size_t hybrid_scratch_bytes(const ModelConfig& c, int64_t max_chunk, int max_seqs);
// Offloaded passes of at most this many tokens go through the expert slot cache (decode and
// small extends: a few tokens appended after a prefix-cache hit, or a short tool result) and
// longer ones stream every layer's experts: min(256 routes, one layer's experts) / top_k, so a
// pass never fetches more than a layer's worth per layer; FT_EXTEND_TOKENS overrides (0: only
// decode-sized passes; at most 256 routes, what the device bookkeeping takes).
int64_t extend_tokens(int64_t n_experts, int64_t top_k);
int64_t attention_layers(const ModelConfig& c);

// Validates one forward_batch: sequences in [0, max_seqs) and distinct, n > 0, positions within
// capacity, ids within vocab, at most max_chunk tokens in all. Returns the token count; throws
// ft::Error naming the first problem.
int64_t check_steps(std::span<const CudaSeqStep> steps, int max_seqs, int64_t capacity,
                    int64_t max_chunk, int64_t vocab);

class CudaTransformer {
 public:
  // capacity: positions each sequence's KV cache holds; max_chunk: most tokens per pass
  // (longer inputs are chunked); max_seqs: sequences with a KV cache (ids 0..max_seqs-1).
  // Uploads the weights and allocates everything here, once. kv_dtype: the KV cache's element
  // type, F32 (the CPU reference's arithmetic) or BF16 (half the bytes; serving and the benches:
  // flash prefill on tensor cores, flash-decoding split over long contexts).
  CudaTransformer(const Model& model, int64_t capacity, int64_t max_chunk = 256,
                  const CudaOffload& offload = {}, int max_seqs = 1,
                  DType kv_dtype = DType::F32);
  ~CudaTransformer();

  // Transformer::forward's contract on sequence 0: runs ids[0..n) at positions pos0.. (the
  // cache must hold 0..pos0-1). logits (host): [n, vocab] when all_logits, else [vocab] for
  // the last token. Throws ft::Error for an id out of range or a cache overflow.
  void forward(const int32_t* ids, int64_t n, int64_t pos0, float* logits, bool all_logits);
  // forward for greedy decoding: the last token's argmax id, its logits left on the device.
  int32_t forward_argmax(const int32_t* ids, int64_t n, int64_t pos0);

  // One pass over several sequences: the tokens of all steps go through the matmuls and
  // experts together, attention runs per sequence. Sequences distinct, total tokens <=
  // max_chunk. Throws ft::Error for a bad sequence, id, position or size.
  void forward_batch(std::span<const CudaSeqStep> steps);

  int max_seqs() const { return max_seqs_; }
  CudaRuntimeStats runtime_stats() const;
  // Decode-sized passes replay captured CUDA graphs (default on); off: every op is launched.
  void set_graphs(bool on) { graphs_on_ = on; }
  // OFFLOAD decode's slot bookkeeping in the router's last block and its miss copy in the
  // experts' gate/up kernel (default; FT_FUSED_FETCH=0), or their own two kernels. Set before
  // the first pass (captured graphs keep the choice they were made with).
  void set_fused_fetch(bool on) { fused_fetch_on_ = on; }
  // One decode-sized pass in `every` runs eagerly with the time-split events (0: never).
  void set_split_every(int every) { sampler_.set_every(every); }

  int64_t capacity() const { return capacity_; }
  int64_t max_chunk() const { return max_chunk_; }
  const Model& model() const { return model_; }
  size_t weight_bytes() const { return weight_bytes_; }
  // The expert slot pool in offload mode, else nullptr.
  const GpuExpertStore* expert_store() const { return store_.get(); }

  // Live resize between passes (issue #9; model/cuda_transformer_resize.cpp). Offload mode: a
  // new pool of `slots` expert slots in [n_experts, moe_layers * n_experts] (cached experts
  // are dropped; the decode workspace is rebuilt and graphs re-capture). KV: every sequence's
  // cache to `capacity` tokens, keeping each open sequence's first min(old, new) positions.
  // Both allocate before they free where VRAM allows; on OutOfMemory nothing changed.
  void resize_expert_slots(int64_t slots);
  void resize_kv(int64_t capacity, const std::vector<bool>& open);
  size_t kv_token_bytes() const;  // KV bytes of one token of one sequence
  DType kv_dtype() const { return kv_dtype_; }
  int64_t kv_layers() const;      // layers with a KV cache

  // Tensor parallelism (parallel/cuda/cuda_transformer_tp.cpp): the model is one rank's
  // shard (parallel/tp_plan.h); after each attention and FFN block the partial hidden
  // states are summed over comm (not owned; outlives this), rank 0 alone keeping the
  // residual. full_q_dim / full_kv_dim: the unsharded widths (full-width q/k norms).
  // Call before the first pass, on the thread and device that run the passes.
  void set_tp(cuda::Comm* comm, int64_t full_q_dim, int64_t full_kv_dim);
  // Vocab-split lm_head (after set_tp): the shard's lm_head is this rank's rows
  // tp_vocab_range(vocab, world, rank) (parallel/tp_plan.h); every logits pass all-gathers the
  // ranks' pieces of `pad` rows into [tokens, vocab] on every rank.
  void set_tp_vocab(int64_t pad);

  // ---- Hybrid models (DeltaNet layers; model/cuda_delta_net.cpp), and sequence state
  // import/export for the prefix cache. A sequence's recurrent state is every DeltaNet layer's
  // conv state, then every layer's delta (ssm) state, in the CPU KVCache's layout: exactly
  // KVCache::conv ([n_delta, conv_dim, kernel - 1]) followed by KVCache::ssm ([n_delta, n_v_heads,
  // k_head_dim, v_head_dim]), f32; 0 bytes without DeltaNet layers. A step of a hybrid model
  // must start at position 0 (the state restarts) or at recurrent_len(seq) (ft::Error
  // otherwise), as on the CPU. All of these wait for the stream (not during a pass).
  size_t state_bytes_per_seq() const;
  void read_state(int seq, float* host);
  // Sets seq's state and the number of tokens it summarises (KVCache::recurrent_len).
  void write_state(int seq, const float* host, int64_t recurrent_len);
  int64_t recurrent_len(int seq) const;
  // The attention layers' K/V of seq at positions [pos0, pos0 + n) to / from host k and v,
  // each [n_attention_layers, n, kv_dim] f32 (attention layers in model order; Runner's
  // export_kv / import_kv layout). One copy per attention layer and matrix.
  void read_kv(int seq, int64_t pos0, int64_t n, float* k, float* v);
  void write_kv(int seq, int64_t pos0, int64_t n, const float* k, const float* v);
  // Device-to-device copies of seq's recurrent state (state_bytes_per_seq() bytes) to / from
  // device memory the caller owns: the prefix cache's VRAM snapshot tier
  // (model/cuda_transformer_prefix.cpp).
  void state_to_device(int seq, void* dst);
  void state_from_device(int seq, const void* src, int64_t recurrent_len);
  // In-pass captures (model/cuda_transformer_capture.cpp): the states at the last pass's marks,
  // capture c in the state layout above, to the host or to caller-owned device memory.
  // capture_slots(): marks a pass may hold (0 without DeltaNet layers or with
  // FT_STATE_CAPTURE=0).
  int32_t capture_slots() const { return n_captures_; }
  void read_capture(int32_t c, float* host);
  void capture_to_device(int32_t c, void* dst);

 private:
  // Device views of one layer's weights (nullptr / empty where the layer has none).
  struct Layer {
    const float *attn_norm, *ffn_norm, *q_norm, *k_norm;
    cuda::DeviceMatrix q, k, v, o;
    const float *q_bias, *k_bias, *v_bias, *o_bias;
    cuda::DeviceMatrix gate, up, down, router;  // dense FFN or the router
    cuda::DeviceExperts experts;
    // gpt-oss (h6g; null otherwise): attention sink logits [n_heads], router bias [E], expert
    // biases gate/up [E, I] and down [E, H] (resident even when the experts are offloaded).
    const float *sinks, *router_bias, *gate_bias, *up_bias, *down_bias;
  };
  cuda::DeviceMatrix upload(const TensorView& t);
  const float* upload(const std::vector<float>& v);  // nullptr when empty
  cuda::DeviceExperts upload_experts(const std::vector<ExpertWeights>& experts);
  // One pass over the tokens of `steps` (already validated; ids_/pos_/seq_ uploaded): x_
  // holds the final hidden states after.
  void run_layers(std::span<const CudaSeqStep> steps, int64_t n);
  void attention_block(int64_t layer, std::span<const CudaSeqStep> steps, int64_t n);
  void ffn_block(int64_t layer, int64_t n);
  // routed: route_ids_/route_w_ are already set (the small path fuses the norm, the router GEMV
  // and the top-k softmax into one launch).
  // ensured: the slot cache's bookkeeping already ran in the router (fused_fetch).
  void moe_block(int64_t layer, int64_t n, bool routed, bool ensured = false);
  // Whether an n-token pass's OFFLOAD layers fuse their bookkeeping into the router and their
  // miss copy into the experts (set_fused_fetch; not in a timed pass).
  bool fused_fetch(int64_t n) const;
  void moe_hybrid(int64_t layer, int64_t n, cuda::MoeArgs a);
  // Final norm + lm_head of every token (small passes) into logits_.
  void all_logits(int64_t n);
  void pass(std::span<const CudaSeqStep> steps, int64_t n, float* logits_all);
  // KV cache of (seq, layer) as kv_dtype_ elements (model/cuda_transformer_kv.cpp).
  void* k_cache(int64_t seq, int64_t layer) const;
  void* v_cache(int64_t seq, int64_t layer) const;
  size_t kv_elem_bytes() const;
  // BF16 KV: the flash-decoding workspace for capacity_ (graph-stable; rebuilt by resize_kv).
  void alloc_attention_split();
  cuda::AttentionSplit attention_split() const;
  DType kv_dtype_ = DType::F32;
  cuda::DeviceBuffer split_partial_, split_counters_;
  int64_t max_splits_ = 0;
  // Per-step time split (model/cuda_transformer_timing.cpp): a timed pass records an event at
  // each phase boundary (mark is a no-op otherwise); timing_end waits and adds into rt_.
  void timing_begin(double weight);
  void mark(StepPhase phase);
  void timing_end();
  StepSampler sampler_;
  std::vector<std::unique_ptr<cuda::TimingEvent>> mark_events_;
  std::vector<StepPhase> marks_;
  double timing_weight_ = 0;  // 0: this pass is not timed
  // Hybrid pieces (model/cuda_delta_net.cpp): DeltaNet and shared-expert weights of a layer.
  struct HybridLayer {
    cuda::DeviceMatrix qkv, z, b, a, out;  // DeltaNet layers
    const float *conv = nullptr, *a_log = nullptr, *dt_bias = nullptr, *norm = nullptr;
    cuda::DeviceMatrix sh_gate, sh_up, sh_down, sh_logit;  // MoE layers with a shared expert
  };
  void upload_hybrid(const LayerWeights& L);  // appends to hybrid_layers_
  void alloc_hybrid(int64_t max_chunk);       // state and scratch; kv_slot_
  // Per pass, before any op: checks each step continues its recurrent state (or restarts at 0),
  // zeroes restarted states, records the new lengths.
  void begin_recurrent(std::span<const CudaSeqStep> steps);
  void delta_net_block(int64_t layer, int64_t n);
  void shared_expert(int64_t layer, int64_t n);  // x_ += sigmoid(xn_ . g) * SwiGLU_shared(xn_)
  float* conv_state(int64_t layer) const;        // sequence 0's; + seq * state_stride_
  float* ssm_state(int64_t layer) const;

  const Model& model_;
  const ModelConfig& c_;
  int64_t capacity_, max_chunk_;
  int max_seqs_;
  MoeMode mode_ = MoeMode::OFFLOAD;
  double hybrid_f_ = 0.5;  // pcie / (pcie + cpu)
  bool graphs_on_ = true;
  bool fused_fetch_on_ = true;
  Rope rope_;
  size_t weight_bytes_ = 0;
  std::vector<cuda::DeviceBuffer> storage_;  // every uploaded weight
  std::vector<std::vector<float>> host_scales_;  // NVFP4 experts' global scales (DeviceExperts)
  std::vector<Layer> layers_;
  cuda::DeviceMatrix embed_, lm_head_;
  const float* final_norm_ = nullptr;
  std::unique_ptr<cuda::Blas> blas_;
  std::unique_ptr<cuda::MoeWorkspace> moe_;
  // Offload: the slot pool, the decode workspace over it, and whether this pass streams.
  std::unique_ptr<GpuExpertStore> store_;
  std::unique_ptr<cuda::MoeWorkspace> moe_pool_;  // decode-sized passes over the slot pool
  int64_t slot_tokens_ = cuda::k_gemv_max_tokens;  // longest pass not streamed (extend_tokens)
  bool streaming_ = false;
  std::vector<int32_t> host_ids_, host_slots_;  // decode: routed ids and their slots
  cuda::DeviceBuffer kv_k_, kv_v_;              // [max_seqs, n_layers, capacity, kv_dim]
  int64_t seq_stride_ = 0;                      // elements per sequence in kv_k_ / kv_v_
  // Per-pass token metadata: ids_, pos_, seq_ on the device, staged through pinned memory.
  cuda::DeviceBuffer pos_, seq_;
  cuda::PinnedBuffer staging_;  // [3, max_chunk] i32: ids, pos, seq
  cuda::PinnedBuffer logits_host_;  // [k_gemv_max_tokens, vocab] small-pass logits
  cuda::PinnedBuffer argmax_host_;  // [k_gemv_max_tokens] i32: the steps' greedy ids
  cuda::DeviceBuffer argmax_;       // [k_gemv_max_tokens] i32: argmax_rows's output
  // forward / forward_argmax on sequence 0, in passes of at most max_chunk tokens.
  void forward_seq0(const int32_t* ids, int64_t n, int64_t pos0, float* logits, bool all_logits,
                    int32_t* argmax);
  cuda::Stream stream_;
  std::unique_ptr<cuda::Graph> graphs_[cuda::k_gemv_max_tokens + 1];
  bool capturable_ = true;  // false in host-bookkeeping HYBRID (host round trips per layer)
  CudaRuntimeStats rt_;
  struct Hybrid;  // HYBRID with host bookkeeping (FT_HYBRID_HOST=1): CPU workers and scratch
  std::unique_ptr<Hybrid> hybrid_;
  // HYBRID with device bookkeeping (the default): the CPU share's coordinator and mailbox.
  std::unique_ptr<CpuShare> share_;
  int64_t hybrid_q16_ = 0;  // hybrid_f_ in the rule's Q16
  void moe_hybrid_device(int64_t layer, int64_t n, cuda::MoeArgs a);
  // Its admissions (CPU-computed misses copied into slots in the background): a side stream
  // forked after each layer's ensure and joined at the end of the pass; none after layer
  // admit_last_ (the join would wait for them), at most admit_max_ in flight.
  struct Admit {
    cuda::Stream stream;
    cuda::Event fork, join;
    bool pending = false;
  };
  std::unique_ptr<Admit> admit_;
  int64_t admit_last_ = -1;
  int32_t admit_max_ = 0;
  void set_admissions();
  void join_admissions();
  cuda::DeviceBuffer cos_, sin_;                // [capacity, rot_dim / 2]
  // Scratch, [max_chunk, width]:
  cuda::DeviceBuffer ids_, x_, xn_, q_, k_, v_, att_, tmp_, gate_, up_, router_, route_ids_,
      route_w_, slot_ids_, logits_;
  cuda::DeviceBuffer route_counter_;  // the fused router GEMV's block count (zero between calls)
  int64_t logit_rows_ = 0;  // rows of logits_ (lm_head runs in pieces of this many tokens)
  // Tensor parallelism: ranks > 0 zero x_ before adding a block's partial; tp_reduce sums
  // x_ over the ranks; tp_qk_norm is the full-width q/k rmsnorm over sharded heads.
  void tp_zero_residual(int64_t n);
  void tp_reduce(int64_t n);
  void tp_qk_norm(const float* q_norm, const float* k_norm, int64_t n);
  // A whole-expert shard (c_.router_experts > 0): the routed ids it computes, else all.
  cuda::RouteLocal route_local() const;
  // y [rows, vocab] = xn [rows, hidden] lm_head^T; vocab-split: the local rows, all-gathered.
  void lm_head_rows(const float* xn, int64_t rows, float* y);
  int64_t tp_vocab_pad_ = 0;                // 0: lm_head replicated
  cuda::DeviceBuffer tp_vpart_, tp_vgather_;  // [logit_rows, pad], [world, logit_rows, pad]
  cuda::Comm* tp_ = nullptr;
  int64_t tp_q_dim_ = 0, tp_kv_dim_ = 0;
  cuda::DeviceBuffer tp_sumsq_;  // [2, max_chunk]: q and k row sums of squares
  // Hybrid: per-layer index among layers of its kind (attention layers own KV, DeltaNet layers
  // a state slot), the recurrent state [max_seqs, state_stride_] and scratch.
  std::vector<HybridLayer> hybrid_layers_;
  std::vector<int64_t> kv_slot_;
  int64_t n_delta_ = 0, conv_size_ = 0, ssm_size_ = 0, state_stride_ = 0;
  std::vector<int64_t> rec_len_;  // [max_seqs] tokens each state summarises
  std::vector<int64_t> step_starts_;  // this pass's step offsets, then n (chunked delta rule)
  // In-pass captures: [n_captures_, state_stride_]; this pass's marks as pass token indices
  // (the state after the tokens before it) with their step.
  void capture_conv(int64_t layer, const float* qkv);  // before the conv overwrites the state
  int32_t n_captures_ = 0;
  // The chunked delta rule fits this device's shared memory (else prefill runs the recurrent
  // form and chunks end at anchors: no in-pass captures).
  bool delta_chunked_ = true;
  cuda::DeviceBuffer captures_;
  std::vector<int32_t> mark_at_, step_seqs_;
  cuda::DeviceBuffer state_, qg_, dn_qkv_, dn_conv_, dn_z_, dn_b_, dn_a_, dn_out_, sh_g_, sh_u_,
      sh_logit_;
};

}  // namespace ft
