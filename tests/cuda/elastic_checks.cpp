// Elastic memory checks (issue #9): CudaTransformer's live expert-pool and KV resizes between
// passes leave two sequences' greedy decode identical to an unresized run (graphs re-captured,
// all-resident <-> offload, KV copied at a new capacity), and a device allocation that cannot
// fit throws OutOfMemory and leaves the device usable.
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "base/error.h"
#include "cuda_checks.h"
#include "engine/sampler.h"
#include "experts/gpu_expert_store.h"
#include "model/cuda_transformer.h"
#include "model/model.h"

namespace ft::cuda_checks {

namespace {

// Progress on stderr when FT_TRACE is set (a crash's last stage without a debugger).
void trace(const char* what) {
  if (std::getenv("FT_TRACE")) std::fprintf(stderr, "elastic: %s\n", what);
}

// Two sequences decoded together for n steps after their prompts; `between(step, tf)` runs
// before each pass. Returns both sequences' greedy ids and every step's logits.
struct Run {
  std::vector<int32_t> ids[2];
  std::vector<float> logits;
};

template <class Between>
Run decode_two(const Model& m, const HostExperts& host, int64_t slots, int64_t n,
               Between between) {
  const ModelConfig& c = m.config();
  CudaTransformer tf(m, 128, 64, CudaOffload{.experts = &host, .slots = slots}, 2);
  trace("constructed");
  Run r;
  std::vector<int32_t> prompt[2];
  for (int s = 0; s < 2; ++s)
    for (int i = 0; i < 12 + 5 * s; ++i) prompt[s].push_back((7 + 31 * i + 101 * s) % c.vocab_size);
  std::vector<float> lg[2] = {std::vector<float>(c.vocab_size), std::vector<float>(c.vocab_size)};
  std::vector<CudaSeqStep> steps;
  for (int s = 0; s < 2; ++s)
    steps.push_back({s, prompt[s].data(), static_cast<int64_t>(prompt[s].size()), 0, lg[s].data()});
  tf.forward_batch(steps);
  trace("prefilled");
  int64_t pos[2] = {static_cast<int64_t>(prompt[0].size()), static_cast<int64_t>(prompt[1].size())};
  int32_t next[2];
  for (int64_t k = 0; k < n; ++k) {
    for (int s = 0; s < 2; ++s) {
      next[s] = argmax(lg[s].data(), c.vocab_size);
      r.ids[s].push_back(next[s]);
      r.logits.insert(r.logits.end(), lg[s].begin(), lg[s].end());
    }
    between(k, tf);
    trace("step");
    steps.clear();
    for (int s = 0; s < 2; ++s) steps.push_back({s, &next[s], 1, pos[s]++, lg[s].data()});
    tf.forward_batch(steps);
  }
  return r;
}

std::string resize_parity(const std::string& dir) {
  trace("load");
  auto m = Model::load(dir);
  const ModelConfig& c = m->config();
  trace("copy_of");
  const HostExperts host = HostExperts::copy_of(*m);
  trace("plain run");
  const int64_t E = c.n_experts, all = host.moe_layers * E;
  const int64_t n = 40;
  const Run plain = decode_two(*m, host, 2 * E, n, [](int64_t, CudaTransformer&) {});
  const int64_t sizes[] = {E, all, E + 1, all / 2 + 1, 2 * E};
  const int64_t caps[] = {256, 96, 512, 128};
  int resizes = 0;
  const Run resized = decode_two(*m, host, 2 * E, n, [&](int64_t k, CudaTransformer& tf) {
    if (k % 5 == 2) {
      tf.resize_expert_slots(sizes[(k / 5) % 5]);
      ++resizes;
    }
    if (k % 7 == 3) {
      tf.resize_kv(caps[(k / 7) % 4], {true, true});
      ++resizes;
    }
  });
  std::string err;
  for (int s = 0; s < 2; ++s)
    if (plain.ids[s] != resized.ids[s])
      err += fmt::format("sequence {}: greedy ids differ after {} resizes\n", s, resizes);
  float max_d = 0, max_ref = 0;
  for (size_t i = 0; i < plain.logits.size(); ++i) {
    max_d = std::max(max_d, std::fabs(plain.logits[i] - resized.logits[i]));
    max_ref = std::max(max_ref, std::fabs(plain.logits[i]));
  }
  if (max_d > 1e-3f * max_ref)
    err += fmt::format("logits differ by {} (max |ref| {})\n", max_d, max_ref);
  return err;
}

std::string oom_throws() {
  try {
    cuda::DeviceBuffer huge(size_t{1} << 50);  // 1 PiB
    return "a 1 PiB allocation did not fail\n";
  } catch (const OutOfMemory& e) {
    if (std::string(e.what()).find("cannot allocate") == std::string::npos)
      return fmt::format("unexpected message: {}\n", e.what());
  }
  // The device is still usable: a copy round trip.
  const std::vector<float> v = randv(1000, 3);
  cuda::DeviceBuffer b = up(v);
  std::vector<float> back(v.size());
  cuda::copy_to_host(back.data(), b.data(), v.size() * sizeof(float));
  return back == v ? "" : "the device is unusable after an out-of-memory error\n";
}

}  // namespace

std::vector<Check> elastic_checks(const std::string& fixtures_dir) {
  const std::string dir = fixtures_dir + "/qwen3_moe";
  return {{"elastic/resize_parity", [dir] { return resize_parity(dir); }},
          {"elastic/oom_throws", [] { return oom_throws(); }}};
}

}  // namespace ft::cuda_checks
