// CudaTransformer live resize (issue #9): the expert slot pool and the sequences' KV change
// size between passes; graphs captured over the old buffers are dropped and re-capture.
#include <algorithm>

#include "base/error.h"
#include "experts/gpu_expert_store.h"
#include "model/cuda_transformer.h"

namespace ft {

namespace {
cuda::DeviceBuffer device_floats(int64_t count) {
  return cuda::DeviceBuffer(count * sizeof(float));
}
}  // namespace

void CudaTransformer::resize_expert_slots(int64_t slots) {
  if (!store_) fail("every expert is resident (fused backend): there is no expert cache to resize");
  const HostExperts& host = *store_->host();
  const int64_t all = host.moe_layers * host.n_experts;
  if (slots < host.n_experts || slots > all)
    fail("{} expert slots is outside [{}, {}] (one layer's experts .. all of them)", slots,
         host.n_experts, all);
  if (slots == store_->slots()) return;
  if (mode_ == MoeMode::HYBRID && !hybrid_ && !share_ && slots < all)
    fail("this HYBRID runner started with every expert resident (no CPU workers); it cannot "
         "shrink its expert cache");
  cuda::StreamScope scope(stream_);
  cuda::synchronize();  // no kernel or copy still reads the old pool
  // As at construction: OFFLOAD keeps the bookkeeping on the device (an all-resident pool has
  // none, so the flag cannot come from the pool being replaced).
  const bool device_cache = mode_ == MoeMode::OFFLOAD || share_ != nullptr;
  const int64_t inter = host.inter;
  auto make = [&](int64_t n, std::unique_ptr<GpuExpertStore>& store,
                  std::unique_ptr<cuda::MoeWorkspace>& ws) {
    store = std::make_unique<GpuExpertStore>(host, n, device_cache);
    if (!store->all_resident())
      ws = std::make_unique<cuda::MoeWorkspace>(cuda::k_gemv_max_tokens, c_.top_k, n,
                                                c_.hidden, inter);
  };
  // The retired pool's counters stay in the cumulative stats.
  auto retire = [&] {
    const ExpertCacheStats c = store_->cache_stats();
    const ExpertStoreStats e = store_->stats();
    rt_.hits += c.hits, rt_.misses += c.misses, rt_.probation += c.probation;
    rt_.fetched_experts += e.fetched_experts;
    rt_.fetched_bytes += e.fetched_bytes, rt_.streamed_bytes += e.streamed_bytes;
  };
  std::unique_ptr<GpuExpertStore> next;
  std::unique_ptr<cuda::MoeWorkspace> ws;
  try {
    make(slots, next, ws);  // both pools at once where VRAM allows: the old one stays valid
  } catch (const OutOfMemory&) {
    next.reset();
    ws.reset();
    if (slots > store_->slots()) throw;  // growing: keep the old pool
    // Shrinking under pressure: free the old pool first; if even the smaller one does not
    // fit, put the old size back (it fitted a moment ago) and report the failure.
    const int64_t old = store_->slots();
    retire();
    moe_pool_.reset();
    store_.reset();
    try {
      make(slots, store_, moe_pool_);
    } catch (const OutOfMemory&) {
      make(old, store_, moe_pool_);
      for (auto& g : graphs_) g.reset();
      throw;
    }
    for (auto& g : graphs_) g.reset();
    return;
  }
  retire();
  moe_pool_.reset();
  store_ = std::move(next);
  moe_pool_ = std::move(ws);
  for (auto& g : graphs_) g.reset();
}

// Layers with a KV cache: the per-sequence block holds [layers][capacity][kv_dim].
int64_t CudaTransformer::kv_layers() const { return seq_stride_ / (capacity_ * c_.kv_dim()); }

size_t CudaTransformer::kv_token_bytes() const {
  return static_cast<size_t>(2 * kv_layers() * c_.kv_dim()) * kv_elem_bytes();
}

void CudaTransformer::resize_kv(int64_t capacity, const std::vector<bool>& open) {
  FT_CHECK(static_cast<int>(open.size()) == max_seqs_, "{} open flags", open.size());
  if (capacity <= 0) fail("a KV capacity of {} tokens per sequence is too small", capacity);
  if (capacity == capacity_) return;
  cuda::StreamScope scope(stream_);
  cuda::synchronize();
  const int64_t kvd = c_.kv_dim(), n_attn = kv_layers(), stride = n_attn * capacity * kvd;
  // Allocate everything first: an OutOfMemory here leaves the old cache in place.
  const size_t es = kv_elem_bytes();
  cuda::DeviceBuffer k(max_seqs_ * stride * es), v(max_seqs_ * stride * es);
  std::vector<float> cs, sn;
  rope_tables(rope_, capacity, cs, sn);
  cuda::DeviceBuffer cos = device_floats(static_cast<int64_t>(cs.size()));
  cuda::DeviceBuffer sin = device_floats(static_cast<int64_t>(sn.size()));
  cos.upload(cs.data(), cs.size() * sizeof(float));
  sin.upload(sn.data(), sn.size() * sizeof(float));
  const int64_t keep = std::min(capacity, capacity_);
  for (int s = 0; s < max_seqs_; ++s) {
    if (!open[s]) continue;
    for (int64_t a = 0; a < n_attn; ++a) {  // attention slots: [seq][slot][pos][kv_dim]
      const int64_t to = s * stride + a * capacity * kvd, from = s * seq_stride_ + a * capacity_ * kvd;
      cuda::copy_on_device(k.as<char>() + to * es, kv_k_.as<char>() + from * es, keep * kvd * es);
      cuda::copy_on_device(v.as<char>() + to * es, kv_v_.as<char>() + from * es, keep * kvd * es);
    }
  }
  cuda::stream_synchronize();
  kv_k_ = std::move(k);
  kv_v_ = std::move(v);
  cos_ = std::move(cos);
  sin_ = std::move(sin);
  seq_stride_ = stride;
  capacity_ = capacity;
  alloc_attention_split();  // BF16: the flash-decoding grid covers the new capacity
  for (auto& g : graphs_) g.reset();
}

}  // namespace ft
