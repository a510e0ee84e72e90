// CpuShare: HYBRID decode's CPU coordinator (mailbox polling, the routes' expert matmuls on
// the pool) and compute_cpu_routes, which the host-bookkeeping HYBRID path shares.
#include "experts/cpu_share.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "base/error.h"
#include "base/log.h"
#include "experts/gpu_expert_store.h"
#include "ops/ops.h"

namespace ft {

int64_t compute_cpu_routes(ThreadPool& pool, const HostExperts& host, int64_t layer,
                           const CpuRoutes& r, float* out, CpuRouteScratch& s) {
  const int64_t H = host.hidden, I = host.inter;
  s.items.clear();
  for (int64_t i = 0; i < r.routes; ++i)
    if (r.ids[i] >= 0) s.items.push_back(i);
  const int64_t m = static_cast<int64_t>(s.items.size());
  if (m == 0) return 0;
  s.g.resize(m * I), s.u.resize(m * I), s.d.resize(m * H);
  s.views.resize(3 * m);
  for (int64_t j = 0; j < m; ++j) {  // each matrix in its own format (mixed experts)
    const int64_t e = r.ids[s.items[j]];
    FT_CHECK(e < host.n_experts, "cpu routes: expert {} of {}", e, host.n_experts);
    for (int mat = 0; mat < 3; ++mat) s.views[3 * j + mat] = host.expert_view(layer, e, mat);
  }
  std::vector<ops::GemmProblem> gu, dn;
  gu.reserve(2 * m), dn.reserve(m);
  for (int64_t j = 0; j < m; ++j) {
    const float* xt = r.x + (s.items[j] / r.top_k) * H;
    gu.push_back({xt, 1, &s.views[3 * j], s.g.data() + j * I});
    gu.push_back({xt, 1, &s.views[3 * j + 1], s.u.data() + j * I});
    dn.push_back({s.g.data() + j * I, 1, &s.views[3 * j + 2], s.d.data() + j * H});
  }
  ops::matmul_grouped(pool, gu);
  ops::silu_mul(pool, s.g.data(), s.u.data(), m * I, s.g.data());
  ops::matmul_grouped(pool, dn);
  for (int64_t j = 0; j < m; ++j) {  // items ascend in (t, k): top-k order per token
    const int64_t route = s.items[j];
    float* o = out + (route / r.top_k) * H;
    const float wk = r.w[route];
    for (int64_t c = 0; c < H; ++c) o[c] += wk * s.d[j * H + c];
  }
  return m;
}

CpuShare::CpuShare(const HostExperts& host, int64_t top_k, int64_t max_tokens, int threads)
    : host_(host),
      top_k_(top_k),
      box_(cuda::cpu_share_box_bytes(max_tokens * top_k, max_tokens, host.hidden)),
      state_(3 * sizeof(int64_t)),
      pool_(threads, false) {
  std::memset(box_.data(), 0, box_.bytes());
  const int64_t zero[3] = {0, 0, 0};
  state_.upload(zero, sizeof(zero));
  args_.box = static_cast<char*>(box_.device_data());
  args_.seq = state_.as<uint64_t>();
  args_.pending = state_.as<uint64_t>() + 1;
  args_.cpu_experts = state_.as<int64_t>() + 2;
  args_.hidden = host.hidden;
  args_.max_routes = max_tokens * top_k;
  args_.max_tokens = max_tokens;
  thread_ = std::thread([this] { loop(); });
}

CpuShare::~CpuShare() {
  quit_ = true;
  thread_.join();
}

// Polls ready; spins (pause) for a while after each job, since a decode step submits one per
// MoE layer tens of microseconds apart, then sleeps with a growing interval (up to 200 us) so
// an idle server leaves the core alone.
void CpuShare::loop() {
  const cuda::CpuShareBox box =
      cuda::cpu_share_box(box_.data(), args_.max_routes, args_.max_tokens, args_.hidden);
  cuda::CpuShareHeader* head = box.head;
  const int32_t* ids = box.ids;
  const float *w = box.w, *x = box.x;
  float* y = box.y;
  std::atomic_ref<uint64_t> ready(head->ready), done(head->done), error(head->error);
  // The box was zeroed before this thread started, so 0 is "no job yet". (Reading ready here
  // instead lost job 1 whenever the first decode step rang before the thread got to run: the
  // timeouts "did not answer job 1" on a loaded host.)
  uint64_t seen = 0;
  using clock = std::chrono::steady_clock;
  auto last = clock::now();
  int64_t nap_us = 0;
  while (!quit_.load(std::memory_order_relaxed)) {
    const uint64_t r = ready.load(std::memory_order_acquire);
    if (r == seen) {
      if (clock::now() - last < std::chrono::milliseconds(5)) {
        _mm_pause();
      } else {
        nap_us = std::min<int64_t>(200, nap_us + 10);
        std::this_thread::sleep_for(std::chrono::microseconds(nap_us));
      }
      continue;
    }
    seen = r;
    nap_us = 0;
    std::atomic_ref<uint64_t>(head->started).store(r, std::memory_order_relaxed);
    const auto t0 = clock::now();
    const int64_t n = head->n_tokens, routes = head->routes;
    try {
      FT_CHECK(n > 0 && n <= args_.max_tokens && routes == n * top_k_ &&
                   head->layer >= 0 && head->layer < host_.n_layers && host_.has_layer(head->layer),
               "cpu share: job of {} tokens, {} routes, layer {}", n, routes, head->layer);
      std::fill(y, y + n * args_.hidden, 0.f);
      compute_cpu_routes(pool_, host_, head->layer, {x, ids, w, routes, top_k_}, y, scratch_);
    } catch (const std::exception& e) {
      FT_LOG_WARN("hybrid CPU share: {}", e.what());
      error.store(1, std::memory_order_release);
    }
    done.store(r, std::memory_order_release);
    last = clock::now();
    ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(last - t0).count();
    ++jobs_;
  }
}

void CpuShare::check() {
  const auto* head = static_cast<const cuda::CpuShareHeader*>(box_.data());
  // Not sticky: the step that saw it fails, later ones get their own verdict.
  const uint64_t e =
      std::atomic_ref<uint64_t>(const_cast<uint64_t&>(head->error)).exchange(0, std::memory_order_acq_rel);
  auto word = [&](const uint64_t& w) {
    return std::atomic_ref<uint64_t>(const_cast<uint64_t&>(w)).load(std::memory_order_acquire);
  };
  if (e == 2)
    fail("hybrid decode: the CPU share did not answer job {} within {} s (mailbox: ready {}, "
         "taken {}, done {}; {} jobs done)",
         word(head->waited), args_.timeout_ns / 1e9, word(head->ready), word(head->started),
         word(head->done), jobs_.load());
  if (e != 0) fail("hybrid decode: the CPU share failed (see the log)");
}

int64_t CpuShare::cpu_experts() const {
  int64_t v = 0;
  cuda::copy_to_host(&v, args_.cpu_experts, sizeof(v));
  return v;
}

}  // namespace ft
