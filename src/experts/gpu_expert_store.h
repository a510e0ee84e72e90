// Expert offload for the CUDA runner: every routed expert in page-locked host memory
// (HostExperts), VRAM as one pool of expert slots shared by all MoE layers (GpuExpertStore)
// run by ExpertCache's policy. Plain C++ over backend/cuda/cuda_ops.h (no CUDA headers);
// built into ft_cuda_model only.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <vector>

#include "backend/cuda/cpu_share.h"
#include "backend/cuda/cuda_ops.h"
#include "experts/expert_cache.h"
#include "model/model.h"

namespace ft {

// Each MoE layer's experts stacked in one pinned block, laid out as the device stacks are:
// gate [E, record] | up [E, record] | down [E, record], one cuda::ExpertRecord per expert matrix
// (the rows, then FP8 / NVFP4 scales). Mixed formats (issue #6): each layer's gate, up and down
// have their own dtype (a Q4_K_M file's Q6_K down in some layers); the VRAM slot pool holds any
// layer's expert, so a slot is the largest record of each matrix over the layers
// (slot_matrix_bytes) and a pool view reads the layer's experts with that stride.
class HostExperts {
 public:
  // A pinned copy of the model's routed experts (any dtypes; every expert of one layer's matrix
  // in one dtype and shape, as a stacked tensor is).
  // progress(done, total): bytes copied so far, after each layer (a start-up progress bar).
  static HostExperts copy_of(const Model& model,
                             const std::function<void(size_t done, size_t total)>& progress = {});
  // The routed experts' shape (layers, count, widths, formats) with no memory: what the planner
  // needs before anything is pinned.
  static HostExperts shape_of(const Model& model);
  // Random experts of config's shapes (std ~0.05): a random block memcpy-tiled at a
  // per-matrix offset, on `threads` threads; tens of GB in seconds. A block-quantized dtype
  // (GGUF formats, MXFP4) quantizes random pools of rows once and tiles whole rows of them;
  // FP8 (128x128 tiles) quantizes 8 records of each shape and copies them.
  static HostExperts synthetic(const ModelConfig& config, uint64_t seed, int threads,
                               DType dtype = DType::BF16);

  bool has_layer(int64_t l) const { return layers_[l].data() != nullptr; }
  // Matrix m (0 gate, 1 up, 2 down) of layer l: its dtype and one expert's record bytes.
  DType type(int64_t l, int m) const { return formats_[l][m].dtype; }
  size_t record_bytes(int64_t l, int m) const { return formats_[l][m].record; }
  // Stack of matrix m of layer l: [n_experts, record_bytes(l, m)].
  const char* matrix(int64_t l, int m) const;
  const char* gate(int64_t l) const { return matrix(l, 0); }
  const char* up(int64_t l) const { return matrix(l, 1); }
  const char* down(int64_t l) const { return matrix(l, 2); }
  // The pinned block of layer l as a device pointer (mapped memory, read by fetch kernels).
  const char* device_base(int64_t l) const {
    return static_cast<const char*>(layers_[l].device_data());
  }
  size_t layer_bytes(int64_t l) const;          // the three stacks of layer l
  size_t layer_expert_bytes(int64_t l) const;   // one expert of layer l (real bytes moved)
  size_t slot_matrix_bytes(int m) const { return slot_[m]; }  // max record of m over layers
  // One VRAM slot: gate + up + down at their largest (the planner's unit).
  size_t expert_bytes() const { return slot_[0] + slot_[1] + slot_[2]; }
  size_t total_bytes() const;
  // Uniform experts (one dtype, one record size everywhere: synthetic, most HF checkpoints):
  // one stack and one expert matrix in bytes (FT_CHECK uniform()).
  bool uniform() const;
  size_t matrix_bytes() const { return n_experts * expert_matrix_bytes(); }
  size_t expert_matrix_bytes() const;
  // Expert e's matrix m of layer l as a host TensorView (HYBRID CPU compute): its dtype, and
  // the FP8 scale_inv / NVFP4 global scale from the record.
  TensorView expert_view(int64_t l, int64_t e, int m) const;
  // NVFP4 matrices' global scales of layer l, [n_experts] on the host (else nullptr).
  const float* host_gscale(int64_t l, int m) const {
    return formats_[l][m].gscale.empty() ? nullptr : formats_[l][m].gscale.data();
  }
  // Layer l's experts as device stacks at gate/up/down (each holding the layer's records from
  // expert 0, `stride` bytes apart per matrix; 0: the record size).
  cuda::DeviceExperts device_view(int64_t l, const char* gate, const char* up, const char* down,
                                  int64_t count, const size_t* stride = nullptr) const;

  DType dtype = DType::BF16;  // the first MoE layer's gate (profiles key on it)
  int64_t n_layers = 0, moe_layers = 0, n_experts = 0, hidden = 0, inter = 0;

 private:
  struct Format {
    DType dtype = DType::BF16;
    size_t record = 0;
    std::vector<float> gscale;  // NVFP4: [n_experts]
  };
  void set_formats(const Model& model);  // formats_, slot_, dtype, widths from the weights
  void set_uniform(DType t);             // every MoE layer in t (synthetic)
  std::vector<std::array<Format, 3>> formats_;  // [n_layers]
  size_t slot_[3] = {0, 0, 0};
  std::vector<cuda::PinnedBuffer> layers_;  // [n_layers]; empty for dense layers
};

struct ExpertStoreStats {
  int64_t fetched_experts = 0;  // decode misses copied host -> slot
  size_t fetched_bytes = 0;     // decode fetches
  size_t streamed_bytes = 0;    // prefill layer streaming over PCIe (cached experts: in VRAM)
};

// The device side: `slots` expert slots (gate/up/down pools as one stack of `slots` experts),
// and a copy stream. Three modes, by slot count:
//   all resident (slots == moe_layers * E): every expert uploaded once; layer views, no syncs;
//   decode: misses fetched into LRU slots, either with the bookkeeping on the device
//   (ensure_device: the ExpertCache policy as a kernel, misses copied by a kernel reading
//   mapped host memory; no host round trip, graph-capturable) or on the host (ensure: the
//   ids come back, misses go on the copy stream, the compute stream waits on an event; it can
//   leave some misses to the CPU);
//   prefill streaming: whole layers into slots [0, E) and [E, 2E) (double-buffered when
//   slots >= 2E, else one buffer), the next layer's copy overlapping this layer's compute.
// One store uses one bookkeeping side (device_cache at construction).
class GpuExpertStore {
 public:
  GpuExpertStore(const HostExperts& host, int64_t slots, bool device_cache = false);
  bool device_cache() const { return device_cache_; }
  const HostExperts* host() const { return &host_; }

  bool all_resident() const { return all_resident_; }
  bool double_buffered() const { return slots_ >= 2 * host_.n_experts; }
  int64_t slots() const { return slots_; }
  // All-resident view of layer l (expert ids index it directly).
  cuda::DeviceExperts resident(int64_t l) const;
  // The whole pool as one stack of `slots` experts in layer l's formats (slot ids index it).
  cuda::DeviceExperts pool(int64_t l) const;

  // Decode, host bookkeeping: ids [count] (host, any order, repeats allowed) of layer l ->
  // slot ids [count]. Of the m missed experts the first max_fetch (all when < 0) are copied
  // on the copy stream (the current stream waits for them before anything issued after this
  // call); the rest get slot -1 (the caller computes them elsewhere). Returns how many
  // distinct experts were left out. Call only when no kernel issued earlier may still read a
  // slot that this step evicts (the caller has synchronised with the current stream).
  int64_t ensure(int64_t l, const int32_t* ids, int64_t count, int32_t* slot_ids,
                 int64_t max_fetch = -1);
  // Distinct experts of ids [count] (host) that layer l misses now (host bookkeeping).
  int64_t count_misses(int64_t l, const int32_t* ids, int64_t count);
  // Decode, device bookkeeping: ids [count] (device) of layer l -> slot ids [count] (device);
  // misses are fetched by a kernel, all on the current stream (stream order protects slots
  // that earlier kernels still read).
  // With split (HYBRID on the device, backend/cuda/cpu_share.h): only the q* share of the
  // misses is fetched; the rest keep slot -1 and go to the CPU share's mailbox.
  void ensure_device(int64_t l, const int32_t* ids, int64_t count, int32_t* slot_ids,
                     const cuda::HybridSplitArgs* split = nullptr);
  // ensure_device (OFFLOAD) in two halves for kernels that take them over: the bookkeeping's
  // arguments (the router's last block runs it: GemvRoute::ensure), then the copy of the
  // misses it lists (the experts' gate/up kernel runs it: MoeArgs::fetch). Issue the two in
  // that order on the current stream, with nothing between them that reads the pool.
  cuda::SlotEnsureArgs ensure_args(int64_t l, const int32_t* ids, int64_t count,
                                   int32_t* slot_ids) const;
  cuda::MoeFetch miss_fetch(int64_t l) const;
  // HYBRID: copies the admissions of layer l's last ensure_device (CPU-computed misses given a
  // slot) with a small grid, then marks them done. Issue it on a side stream that waited for
  // that ensure; join it before the next pass (or anything that resets the cache).
  void admit_device(int64_t l);
  static constexpr int k_admit_blocks = 16;

  // Prefill streaming over the MoE layers `order` (ascending): begin issues the first copies;
  // acquire(l) makes the default stream wait for layer l and returns its view (ids index it);
  // release(l) after layer l's experts kernels were issued frees its buffer for a later layer.
  // Streaming overwrites the buffers' slots [0, E) (and [E, 2E)), so begin drops their
  // mappings; the cache's other slots keep theirs.
  void stream_begin(const std::vector<int64_t>& order);
  cuda::DeviceExperts stream_acquire(int64_t l);
  void stream_release(int64_t l);

  // Cumulative (device counters are read back: a synchronising copy).
  ExpertCacheStats cache_stats() const;
  ExpertStoreStats stats() const;

 private:
  // Layer l's experts in slots [first_slot, first_slot + n_experts), each matrix's records
  // back to back (resident layers, streamed buffers).
  cuda::DeviceExperts view(int64_t l, int64_t first_slot) const;
  size_t nbuf() const { return double_buffered() ? 2 : 1; }  // prefill layer buffers
  void copy_expert(int64_t l, int64_t expert, int64_t slot);
  // Layer l's experts into the buffer at first_slot (cached_ ones from their slots); returns
  // the bytes copied over PCIe.
  size_t copy_layer(int64_t l, int64_t first_slot);
  void issue_stream_copy(size_t index);
  // fetch_experts' arguments for layer l's experts ids [*count] into slots (blocks: 0 = the
  // default grid).
  cuda::FetchArgs copy_args(int64_t l, const int32_t* ids, const int32_t* slots,
                            const int32_t* count, int blocks) const;

  const HostExperts& host_;
  int64_t slots_;
  bool all_resident_;
  cuda::DeviceBuffer gate_, up_, down_;  // [slots, slot_matrix_bytes(m)] each
  ExpertCache cache_;
  cuda::CopyStream copy_;
  cuda::Event copied_[2], consumed_[2];  // per layer buffer (prefill); copied_[0] for decode
  // Prefill: cached experts' copies within VRAM, beside the PCIe copies (another engine).
  cuda::CopyStream local_;
  cuda::Event local_done_[2];
  std::vector<int64_t> order_;           // streaming: MoE layers in order
  std::vector<int32_t> cached_;          // streaming: slot of each flat expert id, or -1
  std::vector<int64_t> moe_index_;       // [n_layers] -> index among MoE layers, or -1
  size_t next_ = 0;                      // streaming: index of the layer to acquire next
  ExpertStoreStats stats_;
  std::vector<int32_t> distinct_;  // decode scratch
  // Device bookkeeping (cuda::SlotCacheState) and the per-layer miss list.
  bool device_cache_;
  cuda::DeviceBuffer d_slot_for_id_, d_id_of_slot_, d_usage_, d_recency_, d_counters_;
  cuda::DeviceBuffer d_fetch_, d_fetch_slot_, d_n_fetch_;
  cuda::DeviceBuffer d_barrier_;  // MoeFetch::barrier's two words
  cuda::DeviceBuffer d_admit_, d_admit_n_;  // HYBRID admissions: ids | slots; count | in flight
  // MoE layer m's admission list: k_slot_max_ids expert ids, then as many slots.
  int32_t* admit_ids(int64_t moe_layer) const;
  std::vector<const char*> dev_base_;  // [n_layers] mapped host blocks
  cuda::SlotCacheState device_state() const;
};

}  // namespace ft
