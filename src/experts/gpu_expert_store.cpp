// HostExperts (pinned expert stacks) and GpuExpertStore (the VRAM slot pool, decode fetches
// and prefill layer streaming on a copy stream).
#include "experts/gpu_expert_store.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <thread>

#include "base/env.h"
#include "base/error.h"
#include "base/half.h"
#include "quant/quant.h"

namespace ft {

namespace {
uint64_t mix(uint64_t x) {  // splitmix64 finaliser: a per-matrix offset from its coordinates
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The slot cache's thrash window: one decode pass's steps (its MoE layers). FT_SLOT_PROBATION=0
// makes it 1, where no victim is ever recent: plain LRU, for A/B runs.
int64_t probation_window(const HostExperts& host) {
  static const bool on = env_on("FT_SLOT_PROBATION");
  return on ? host.moe_layers : 1;
}
}  // namespace

size_t HostExperts::total_bytes() const {
  size_t t = 0;
  for (const auto& b : layers_) t += b.bytes();
  return t;
}

size_t HostExperts::layer_bytes(int64_t l) const { return n_experts * layer_expert_bytes(l); }

size_t HostExperts::layer_expert_bytes(int64_t l) const {
  return formats_[l][0].record + formats_[l][1].record + formats_[l][2].record;
}

const char* HostExperts::matrix(int64_t l, int m) const {
  const char* b = static_cast<const char*>(layers_[l].data());
  for (int k = 0; k < m; ++k) b += n_experts * formats_[l][k].record;
  return b;
}

bool HostExperts::uniform() const {
  for (int64_t l = 0; l < n_layers; ++l) {
    if (formats_[l][0].record == 0) continue;  // dense layer
    for (int m = 0; m < 3; ++m)
      if (formats_[l][m].dtype != dtype || formats_[l][m].record != slot_[0]) return false;
  }
  return true;
}

size_t HostExperts::expert_matrix_bytes() const {
  FT_CHECK(uniform(), "expert_matrix_bytes: the experts mix formats (use record_bytes)");
  return slot_[0];
}

TensorView HostExperts::expert_view(int64_t l, int64_t e, int m) const {
  const Format& f = formats_[l][m];
  TensorView t;
  t.dtype = f.dtype, t.ndim = 2, t.name = "expert";
  t.shape = m < 2 ? std::array<int64_t, 4>{inter, hidden, 1, 1}
                  : std::array<int64_t, 4>{hidden, inter, 1, 1};
  const char* rec = matrix(l, m) + e * f.record;
  t.data = rec;
  const size_t so = cuda::expert_record(f.dtype, t.shape[0], t.shape[1]).scale_offset;
  if (f.dtype == DType::F8_E4M3_B128) t.scale_inv = reinterpret_cast<const float*>(rec + so);
  if (f.dtype == DType::NVFP4) t.global_scale = f.gscale[e];
  return t;
}

cuda::DeviceExperts HostExperts::device_view(int64_t l, const char* gate, const char* up,
                                             const char* down, int64_t count,
                                             const size_t* stride) const {
  cuda::DeviceExperts d{.gate = gate,
                        .up = up,
                        .down = down,
                        .dtype = formats_[l][0].dtype,
                        .n_experts = count,
                        .hidden = hidden,
                        .inter = inter};
  for (int m = 0; m < 3; ++m) {
    d.types[m] = formats_[l][m].dtype;
    d.stride[m] = stride ? stride[m] : 0;
    d.host_gscale[m] = host_gscale(l, m);
  }
  return d;
}

void HostExperts::set_formats(const Model& model) {
  const ModelConfig& c = model.config();
  n_layers = c.n_layers;
  n_experts = c.n_experts;
  formats_.assign(n_layers, {});
  moe_layers = 0;
  for (int64_t l = 0; l < n_layers; ++l) {
    const auto& ex = model.weights().layers[l].experts;
    if (ex.empty()) continue;
    FT_CHECK(static_cast<int64_t>(ex.size()) == n_experts, "layer {}: {} experts", l, ex.size());
    if (moe_layers++ == 0) {
      dtype = ex[0].gate.dtype;
      inter = ex[0].gate.shape[0];
      hidden = ex[0].gate.shape[1];
    }
    for (int m = 0; m < 3; ++m) {
      const TensorView& t0 = m == 0 ? ex[0].gate : m == 1 ? ex[0].up : ex[0].down;
      const int64_t rows = m < 2 ? inter : hidden, cols = m < 2 ? hidden : inter;
      if (t0.ndim != 2 || t0.shape[0] != rows || t0.shape[1] != cols)
        fail("{}: expert matrix is {}, expected [{}, {}]", t0.name, t0.shape_str(), rows, cols);
      Format& f = formats_[l][m];
      f.dtype = t0.dtype;
      f.record = cuda::expert_record(t0.dtype, rows, cols).bytes;
      slot_[m] = std::max(slot_[m], f.record);
    }
  }
}

void HostExperts::set_uniform(DType t) {
  formats_.assign(n_layers, {});
  for (int64_t l = 0; l < n_layers; ++l)
    if (has_layer(l))
      for (int m = 0; m < 3; ++m) {
        formats_[l][m].dtype = t;
        formats_[l][m].record = cuda::expert_record(t, inter, hidden).bytes;
        slot_[m] = formats_[l][m].record;
      }
}

HostExperts HostExperts::shape_of(const Model& model) {
  HostExperts h;
  h.set_formats(model);
  return h;
}

HostExperts HostExperts::copy_of(const Model& model,
                                 const std::function<void(size_t, size_t)>& progress) {
  HostExperts h;
  h.set_formats(model);
  h.layers_.resize(h.n_layers);
  size_t total = 0, done = 0;  // progress: bytes of every MoE layer, reported per layer
  for (int64_t l = 0; l < h.n_layers; ++l)
    if (!model.weights().layers[l].experts.empty()) total += h.n_experts * h.layer_expert_bytes(l);
  for (int64_t l = 0; l < h.n_layers; ++l) {
    const auto& ex = model.weights().layers[l].experts;
    if (ex.empty()) continue;
    h.layers_[l] = cuda::PinnedBuffer(h.n_experts * h.layer_expert_bytes(l));
    for (int m = 0; m < 3; ++m) {
      Format& f = h.formats_[l][m];
      char* stack = const_cast<char*>(h.matrix(l, m));
      if (f.dtype == DType::NVFP4) f.gscale.resize(h.n_experts);
      for (int64_t e = 0; e < h.n_experts; ++e) {
        const TensorView& t = m == 0 ? ex[e].gate : m == 1 ? ex[e].up : ex[e].down;
        const cuda::ExpertRecord rec = cuda::expert_record(f.dtype, t.shape[0], t.shape[1]);
        FT_CHECK(t.dtype == f.dtype && t.nbytes() == rec.data && rec.bytes == f.record,
                 "{}: experts of one layer differ in dtype or shape", t.name);
        char* dst = stack + e * f.record;
        std::memset(dst, 0, f.record);
        std::memcpy(dst, t.data, rec.data);
        if (f.dtype == DType::F8_E4M3_B128) {
          FT_CHECK(t.scale_inv, "{}: FP8 expert without scale_inv", t.name);
          std::memcpy(dst + rec.scale_offset, t.scale_inv,
                      quant::fp8_b128_scale_count(t.shape[0], t.shape[1]) * sizeof(float));
        }
        if (f.dtype == DType::NVFP4) {
          std::memcpy(dst + rec.scale_offset, &t.global_scale, sizeof(float));
          f.gscale[e] = t.global_scale;
        }
      }
    }
    done += h.n_experts * h.layer_expert_bytes(l);
    if (progress) progress(done, total);
  }
  return h;
}

// Runs fill(dst, k, j) on `threads` threads for every expert matrix of every MoE layer: dst its
// record, k the matrix (0 gate, 1 up, 2 down), j its index over all (the seed of its contents).
template <class Fill>
static void fill_matrices(const HostExperts& h, int threads, const Fill& fill) {
  const int64_t jobs = h.n_layers * h.n_experts * 3;
  threads = std::max(1, threads);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (int64_t j = t; j < jobs; j += threads) {
        const int64_t l = j / (h.n_experts * 3), r = j % (h.n_experts * 3);
        if (!h.has_layer(l)) continue;
        const int k = static_cast<int>(r / h.n_experts);
        const int64_t e = r % h.n_experts;
        fill(const_cast<char*>(h.gate(l)) + k * h.matrix_bytes() + e * h.expert_matrix_bytes(),
             k, j);
      }
    });
  for (auto& th : pool) th.join();
}

// FP8 records (rows, then their 128x128 scale tiles): 8 random gate/up-shaped and 8 down-shaped
// records, quantized once; expert e of matrix k copies one of them.
static HostExperts synthetic_fp8(HostExperts h, uint64_t seed, int threads) {
  constexpr int kDistinct = 8;
  const int64_t I = h.inter, H = h.hidden;
  const size_t rec = h.expert_matrix_bytes();
  std::vector<uint8_t> recs(2 * kDistinct * rec);
  std::vector<std::thread> pool;
  for (int t = 0; t < 2 * kDistinct; ++t)
    pool.emplace_back([&, t] {
      const bool down = t >= kDistinct;
      const int64_t rows = down ? H : I, cols = down ? I : H;
      std::mt19937_64 rng(seed * 7919 + t);
      std::uniform_real_distribution<float> u(-0.0866f, 0.0866f);
      std::vector<float> w(rows * cols);
      for (float& v : w) v = u(rng);
      uint8_t* dst = recs.data() + t * rec;
      const size_t so = cuda::expert_record(DType::F8_E4M3_B128, rows, cols).scale_offset;
      quant::quantize_fp8_b128(w.data(), rows, cols, dst, reinterpret_cast<float*>(dst + so));
    });
  for (auto& th : pool) th.join();
  fill_matrices(h, threads, [&](char* dst, int k, int64_t j) {
    const int which = static_cast<int>(mix(seed ^ (uint64_t(j) << 20)) % kDistinct);
    std::memcpy(dst, recs.data() + ((k == 2 ? kDistinct : 0) + which) * rec, rec);
  });
  return h;
}

// Quantized synthetic experts: pools of 2x a matrix's rows (random, quantized once, on the
// threads), every matrix a run of whole rows from a per-matrix offset.
static HostExperts synthetic_quant(HostExperts h, uint64_t seed, int threads) {
  const quant::QuantType qt = quant::from_dtype(h.dtype);
  const int64_t I = h.inter, H = h.hidden;
  const size_t rb_g = dtype_row_bytes(h.dtype, H), rb_d = dtype_row_bytes(h.dtype, I);
  const int64_t pg = 2 * I, pd = 2 * H;  // pool rows: gate/up (rows of H), down (rows of I)
  std::vector<uint8_t> pool_g(pg * rb_g), pool_d(pd * rb_d);
  threads = std::max(1, threads);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      std::mt19937_64 rng(seed * 7919 + t);
      std::uniform_real_distribution<float> u(-0.0866f, 0.0866f);
      std::vector<float> row(std::max(H, I));
      for (int64_t r = t; r < pg + pd; r += threads) {
        const bool g = r < pg;
        const int64_t n = g ? H : I;
        for (int64_t i = 0; i < n; ++i) row[i] = u(rng);
        uint8_t* dst = g ? pool_g.data() + r * rb_g : pool_d.data() + (r - pg) * rb_d;
        quant::quantize_row(qt, row.data(), dst, n);
      }
    });
  for (auto& th : pool) th.join();
  fill_matrices(h, threads, [&](char* dst, int k, int64_t j) {
    const bool down = k == 2;
    const int64_t rows = down ? H : I, span = (down ? pd : pg) - rows + 1;
    const int64_t off = static_cast<int64_t>(mix(seed ^ (uint64_t(j) << 20)) % span);
    const uint8_t* src = down ? pool_d.data() + off * rb_d : pool_g.data() + off * rb_g;
    std::memcpy(dst, src, h.expert_matrix_bytes());
  });
  return h;
}

HostExperts HostExperts::synthetic(const ModelConfig& c, uint64_t seed, int threads,
                                   DType dtype) {
  if (dtype != DType::BF16 && (!dtype_is_quant(dtype) || dtype == DType::NVFP4))
    fail("synthetic experts: {} is not supported (bf16, FP8 or a block format without "
         "external scales: Q4_0 ... IQ4_XS, MXFP4)", dtype_name(dtype));
  HostExperts h;
  h.dtype = dtype;
  h.n_layers = c.n_layers;
  h.n_experts = c.n_experts;
  h.hidden = c.hidden;
  h.inter = c.expert_dim;
  h.layers_.resize(c.n_layers);
  const size_t stacks = 3 * h.n_experts * cuda::expert_record(dtype, h.inter, h.hidden).bytes;
  for (int64_t l = 0; l < c.n_layers; ++l)
    if (c.layer_is_moe[l]) {
      h.layers_[l] = cuda::PinnedBuffer(stacks);
      ++h.moe_layers;
    }
  h.set_uniform(dtype);
  if (dtype == DType::F8_E4M3_B128) return synthetic_fp8(std::move(h), seed, threads);
  if (dtype != DType::BF16) return synthetic_quant(std::move(h), seed, threads);
  // One random block of uniform values (std 0.05) larger than a matrix; every matrix is a
  // copy of it from its own offset.
  const int64_t n = h.inter * h.hidden;
  std::vector<uint16_t> block(std::max<int64_t>(n * 2, int64_t{1} << 20));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-0.0866f, 0.0866f);
  for (auto& v : block) v = f32_to_bf16(u(rng));
  const int64_t span = static_cast<int64_t>(block.size()) - n + 1;
  fill_matrices(h, threads, [&](char* dst, int, int64_t j) {
    const int64_t off = static_cast<int64_t>(mix(seed ^ (uint64_t(j) << 20)) % span);
    std::memcpy(dst, block.data() + off, n * sizeof(uint16_t));
  });
  return h;
}

GpuExpertStore::GpuExpertStore(const HostExperts& host, int64_t slots, bool device_cache)
    : host_(host),
      slots_(slots),
      all_resident_(slots == host.moe_layers * host.n_experts),
      gate_(slots * host.slot_matrix_bytes(0)),
      up_(slots * host.slot_matrix_bytes(1)),
      down_(slots * host.slot_matrix_bytes(2)),
      cache_(host.n_layers, host.n_experts, slots, probation_window(host)),
      moe_index_(host.n_layers, -1),
      device_cache_(device_cache && slots < host.moe_layers * host.n_experts) {
  FT_CHECK(slots <= host.moe_layers * host.n_experts, "{} slots for {} experts", slots,
           host.moe_layers * host.n_experts);
  int64_t idx = 0;
  for (int64_t l = 0; l < host.n_layers; ++l)
    if (host.has_layer(l)) moe_index_[l] = idx++;
  if (all_resident_) {
    for (int64_t l = 0; l < host.n_layers; ++l)
      if (host.has_layer(l)) copy_layer(l, moe_index_[l] * host.n_experts);
    copy_.synchronize();
  }
  if (device_cache_) {
    const int64_t ids = host.n_layers * host.n_experts;
    d_slot_for_id_ = cuda::DeviceBuffer(ids * sizeof(int32_t));
    d_id_of_slot_ = cuda::DeviceBuffer(slots * sizeof(int32_t));
    d_usage_ = cuda::DeviceBuffer(slots * sizeof(int64_t));
    d_recency_ = cuda::DeviceBuffer(ids * sizeof(int64_t));
    d_counters_ = cuda::DeviceBuffer(cuda::k_slot_counters * sizeof(int64_t));
    d_fetch_ = cuda::DeviceBuffer(cuda::k_slot_max_ids * sizeof(int32_t));
    d_fetch_slot_ = cuda::DeviceBuffer(cuda::k_slot_max_ids * sizeof(int32_t));
    d_n_fetch_ = cuda::DeviceBuffer(sizeof(int32_t));
    d_barrier_ = cuda::DeviceBuffer(2 * sizeof(uint32_t));
    cuda::memset_async(d_barrier_.data(), 0, d_barrier_.bytes());
    // Per MoE layer (a layer's lists are read by its background copy until the pass joins it):
    // ids then slots; counts, then the in-flight total.
    d_admit_ = cuda::DeviceBuffer(host.moe_layers * 2 * cuda::k_slot_max_ids * sizeof(int32_t));
    d_admit_n_ = cuda::DeviceBuffer((host.moe_layers + 1) * sizeof(int32_t));
    cuda::memset_async(d_admit_n_.data(), 0, d_admit_n_.bytes());
    cuda::memset_async(d_recency_.data(), 0, d_recency_.bytes());
    cuda::memset_async(d_counters_.data(), 0, d_counters_.bytes());
    cuda::slot_cache_reset(device_state(), ids);
    cuda::stream_synchronize();
    dev_base_.resize(host.n_layers, nullptr);
    for (int64_t l = 0; l < host.n_layers; ++l)
      if (host.has_layer(l)) dev_base_[l] = host.device_base(l);
  }
}

cuda::SlotCacheState GpuExpertStore::device_state() const {
  return {.slot_for_id = d_slot_for_id_.as<int32_t>(),
          .id_of_slot = d_id_of_slot_.as<int32_t>(),
          .usage = d_usage_.as<int64_t>(),
          .recency = d_recency_.as<int64_t>(),
          .counters = d_counters_.as<int64_t>(),
          .n_experts = host_.n_experts,
          .slots = slots_,
          .window = probation_window(host_)};
}

cuda::SlotEnsureArgs GpuExpertStore::ensure_args(int64_t l, const int32_t* ids, int64_t count,
                                                 int32_t* slot_ids) const {
  FT_CHECK(device_cache_ && moe_index_[l] >= 0, "ensure_device: layer {}", l);
  return {.s = device_state(),
          .layer = l,
          .ids = ids,
          .count = count,
          .slot_ids = slot_ids,
          .fetch = d_fetch_.as<int32_t>(),
          .fetch_slot = d_fetch_slot_.as<int32_t>(),
          .n_fetch = d_n_fetch_.as<int32_t>()};
}

cuda::MoeFetch GpuExpertStore::miss_fetch(int64_t l) const {
  return {.copy = copy_args(l, d_fetch_.as<int32_t>(), d_fetch_slot_.as<int32_t>(),
                            d_n_fetch_.as<int32_t>(), 0),
          .barrier = d_barrier_.as<uint32_t>()};
}

void GpuExpertStore::ensure_device(int64_t l, const int32_t* ids, int64_t count,
                                   int32_t* slot_ids, const cuda::HybridSplitArgs* split) {
  const cuda::SlotEnsureArgs ensure = ensure_args(l, ids, count, slot_ids);
  if (split) {
    cuda::HybridSplitArgs h = *split;
    const int64_t m = moe_index_[l];
    h.admit = admit_ids(m), h.admit_slot = h.admit + cuda::k_slot_max_ids;
    h.n_admit = d_admit_n_.as<int32_t>() + m;
    h.inflight = d_admit_n_.as<int32_t>() + host_.moe_layers;
    cuda::slot_cache_ensure_hybrid(ensure, h);
  } else {
    cuda::slot_cache_ensure(ensure);
  }
  cuda::fetch_experts(miss_fetch(l).copy);
}

void GpuExpertStore::admit_device(int64_t l) {
  FT_CHECK(device_cache_ && moe_index_[l] >= 0, "admit_device: layer {}", l);
  const int64_t m = moe_index_[l];
  int32_t* admit = admit_ids(m);
  int32_t* n = d_admit_n_.as<int32_t>();
  cuda::fetch_experts(copy_args(l, admit, admit + cuda::k_slot_max_ids, n + m, k_admit_blocks));
  cuda::slot_cache_admitted(device_state(), admit + cuda::k_slot_max_ids, n + m,
                            n + host_.moe_layers);
}

int32_t* GpuExpertStore::admit_ids(int64_t moe_layer) const {
  return d_admit_.as<int32_t>() + moe_layer * 2 * cuda::k_slot_max_ids;
}

cuda::FetchArgs GpuExpertStore::copy_args(int64_t l, const int32_t* ids, const int32_t* slots,
                                          const int32_t* count, int blocks) const {
  const size_t E = host_.n_experts, r0 = host_.record_bytes(l, 0), r1 = host_.record_bytes(l, 1);
  return {.gate_src = dev_base_[l],
          .up_src = dev_base_[l] + E * r0,
          .down_src = dev_base_[l] + E * (r0 + r1),
          .gate_dst = gate_.as<char>(),
          .up_dst = up_.as<char>(),
          .down_dst = down_.as<char>(),
          .matrix_bytes = r0,
          .fetch = ids,
          .fetch_slot = slots,
          .n_fetch = count,
          .bytes = {r0, r1, host_.record_bytes(l, 2)},
          .dst_stride = {host_.slot_matrix_bytes(0), host_.slot_matrix_bytes(1),
                         host_.slot_matrix_bytes(2)},
          .blocks = blocks};
}

ExpertCacheStats GpuExpertStore::cache_stats() const {
  if (!device_cache_) return cache_.stats();
  int64_t c[cuda::k_slot_counters];
  cuda::copy_to_host(c, d_counters_.data(), sizeof(c));
  ExpertCacheStats s = cache_.stats();
  s.lookups += c[cuda::SC_LOOKUPS], s.hits += c[cuda::SC_HITS], s.misses += c[cuda::SC_MISSES];
  s.evictions += c[cuda::SC_EVICTIONS], s.probation += c[cuda::SC_PROBATION];
  return s;
}

ExpertStoreStats GpuExpertStore::stats() const {
  ExpertStoreStats s = stats_;
  if (device_cache_) {
    int64_t c[cuda::k_slot_counters];
    cuda::copy_to_host(c, d_counters_.data(), sizeof(c));
    s.fetched_experts += c[cuda::SC_FETCHED];
    // The device counts experts, not layers: a slot's bytes (exact unless formats mix).
    s.fetched_bytes += c[cuda::SC_FETCHED] * host_.expert_bytes();
  }
  return s;
}

// Slots [first, first + E) hold layer l's records back to back (each matrix's region is E
// slots of the largest record, so the layer's E records fit from its start).
cuda::DeviceExperts GpuExpertStore::view(int64_t l, int64_t first) const {
  auto at = [&](const cuda::DeviceBuffer& b, int m) {
    return b.as<char>() + first * host_.slot_matrix_bytes(m);
  };
  return host_.device_view(l, at(gate_, 0), at(up_, 1), at(down_, 2), host_.n_experts);
}

cuda::DeviceExperts GpuExpertStore::pool(int64_t l) const {
  const size_t stride[3] = {host_.slot_matrix_bytes(0), host_.slot_matrix_bytes(1),
                            host_.slot_matrix_bytes(2)};
  return host_.device_view(l, gate_.as<char>(), up_.as<char>(), down_.as<char>(), slots_, stride);
}

cuda::DeviceExperts GpuExpertStore::resident(int64_t l) const {
  FT_CHECK(all_resident_ && moe_index_[l] >= 0, "layer {} is not resident", l);
  return view(l, moe_index_[l] * host_.n_experts);
}

void GpuExpertStore::copy_expert(int64_t l, int64_t e, int64_t slot) {
  char* dst[3] = {gate_.as<char>(), up_.as<char>(), down_.as<char>()};
  for (int m = 0; m < 3; ++m) {
    const size_t rec = host_.record_bytes(l, m);
    copy_.copy_to_device(dst[m] + slot * host_.slot_matrix_bytes(m), host_.matrix(l, m) + e * rec,
                         rec);
  }
}

size_t GpuExpertStore::copy_layer(int64_t l, int64_t first) {
  char* pool[3] = {gate_.as<char>(), up_.as<char>(), down_.as<char>()};
  const int64_t E = host_.n_experts;
  size_t pcie = 0;
  for (int m = 0; m < 3; ++m) {
    const size_t rec = host_.record_bytes(l, m), sb = host_.slot_matrix_bytes(m);
    char* to = pool[m] + first * sb;  // the buffer: E records back to back
    const char* from = host_.matrix(l, m);
    int64_t run = 0;  // first expert of the pending run of host copies
    for (int64_t e = 0; e <= E; ++e) {
      const int32_t s = e < E && !cached_.empty() ? cached_[l * E + e] : -1;
      if (e < E && s < 0) continue;
      if (e > run) {  // experts [run, e) over PCIe in one copy
        copy_.copy_to_device(to + run * rec, from + run * rec, (e - run) * rec);
        pcie += (e - run) * rec;
      }
      if (e < E) local_.copy_to_device(to + e * rec, pool[m] + s * sb, rec);  // from its slot
      run = e + 1;
    }
  }
  return pcie;
}

int64_t GpuExpertStore::count_misses(int64_t l, const int32_t* ids, int64_t count) {
  distinct_.clear();
  for (int64_t i = 0; i < count; ++i)
    if (std::find(distinct_.begin(), distinct_.end(), ids[i]) == distinct_.end())
      distinct_.push_back(ids[i]);
  int64_t m = 0;
  for (int32_t e : distinct_) m += cache_.slot_of(l, e) < 0;
  return m;
}

int64_t GpuExpertStore::ensure(int64_t l, const int32_t* ids, int64_t count, int32_t* slot_ids,
                               int64_t max_fetch) {
  FT_CHECK(!all_resident_ && !device_cache_ && moe_index_[l] >= 0, "ensure: layer {}", l);
  distinct_.clear();
  for (int64_t i = 0; i < count; ++i)
    if (std::find(distinct_.begin(), distinct_.end(), ids[i]) == distinct_.end())
      distinct_.push_back(ids[i]);
  const EnsurePlan plan = cache_.ensure(l, distinct_, max_fetch);
  for (size_t f = 0; f < plan.fetch.size(); ++f) copy_expert(l, plan.fetch[f], plan.fetch_slot[f]);
  if (!plan.fetch.empty()) {
    copy_.record(copied_[0]);
    cuda::wait_on_default(copied_[0]);
    stats_.fetched_experts += static_cast<int64_t>(plan.fetch.size());
    stats_.fetched_bytes += plan.fetch.size() * host_.layer_expert_bytes(l);
  }
  for (int64_t i = 0; i < count; ++i) {
    const size_t d = std::find(distinct_.begin(), distinct_.end(), ids[i]) - distinct_.begin();
    slot_ids[i] = plan.slot_of[d];
  }
  return static_cast<int64_t>(plan.cpu.size());
}

void GpuExpertStore::issue_stream_copy(size_t i) {
  const size_t buf = i % nbuf();
  // The buffer's previous layer must have been consumed by the compute stream.
  if (i >= nbuf()) copy_.wait(consumed_[buf]), local_.wait(consumed_[buf]);
  stats_.streamed_bytes += copy_layer(order_[i], static_cast<int64_t>(buf) * host_.n_experts);
  copy_.record(copied_[buf]);
  local_.record(local_done_[buf]);
}

void GpuExpertStore::stream_begin(const std::vector<int64_t>& order) {
  FT_CHECK(!all_resident_, "stream_begin with every expert resident");
  // Only the buffers' slots are overwritten: the decode cache in the others stays valid, so
  // decode after a prefill (an agent's next turn) starts warm. FT_PREFILL_KEEP_CACHE=0 drops
  // every mapping instead (the old behaviour, for A/B runs).
  const int64_t buffers =
      env_on("FT_PREFILL_KEEP_CACHE") ? static_cast<int64_t>(nbuf()) * host_.n_experts : slots_;
  cache_.drop_slots(buffers);
  if (device_cache_)
    cuda::slot_cache_drop(device_state(), host_.n_layers * host_.n_experts, buffers);
  // Experts cached in the other slots reach the buffers by a copy within the GPU instead of
  // over PCIe (the map is read once per pass; nothing remaps a slot until the pass ends).
  // FT_PREFILL_D2D=0: every expert over PCIe (cached_ empty).
  const int64_t ids = host_.n_layers * host_.n_experts;
  cached_.clear();
  if (env_on("FT_PREFILL_D2D")) {
    cached_.resize(ids);
    if (device_cache_)
      cuda::copy_to_host(cached_.data(), d_slot_for_id_.data(), ids * sizeof(int32_t));
    else
      for (int64_t i = 0; i < ids; ++i)
        cached_[i] = cache_.slot_of(i / host_.n_experts, static_cast<int32_t>(i % host_.n_experts));
  }
  // The first copies overwrite slots that kernels issued before this pass may still read.
  cuda::record_on_default(consumed_[0]);
  copy_.wait(consumed_[0]);
  local_.wait(consumed_[0]);
  order_ = order;
  next_ = 0;
  for (size_t i = 0; i < std::min(nbuf(), order_.size()); ++i) issue_stream_copy(i);
}

cuda::DeviceExperts GpuExpertStore::stream_acquire(int64_t l) {
  FT_CHECK(next_ < order_.size() && order_[next_] == l, "stream_acquire: layer {} out of order", l);
  const size_t buf = next_ % nbuf();
  cuda::wait_on_default(copied_[buf]);
  cuda::wait_on_default(local_done_[buf]);
  return view(l, static_cast<int64_t>(buf) * host_.n_experts);
}

void GpuExpertStore::stream_release(int64_t l) {
  FT_CHECK(next_ < order_.size() && order_[next_] == l, "stream_release: layer {}", l);
  const size_t buf = next_ % nbuf();
  cuda::record_on_default(consumed_[buf]);
  ++next_;
  if (next_ - 1 + nbuf() < order_.size()) issue_stream_copy(next_ - 1 + nbuf());
}

}  // namespace ft
