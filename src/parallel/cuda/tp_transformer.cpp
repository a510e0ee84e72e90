// TpTransformer: the local ranks' threads, NCCL start-up, and the per-step dispatch (with
// several nodes, node 0's step message broadcast to every rank).
#include "parallel/cuda/tp_transformer.h"

#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>

#include "backend/cuda/cuda_ops.h"
#include "base/error.h"

namespace ft {

namespace {
// Step message (int32): kind, step count, all_logits, total tokens; per step seq, n, pos0;
// then the ids of all steps.
enum MsgKind : int32_t { MSG_QUIT = 0, MSG_FORWARD = 1, MSG_BATCH = 2 };
constexpr int64_t k_msg_head = 4;
}  // namespace

struct TpTransformer::Rank {
  int local = 0, global = 0;
  std::thread thread;
  std::mutex m;
  std::condition_variable cv;
  std::function<void(Rank&)> job;
  bool busy = false, quit = false;
  std::exception_ptr error;
  // Made on the rank's thread:
  TpRankSetup setup;
  std::unique_ptr<CudaTransformer> tf;
  std::unique_ptr<cuda::Comm> comm;
  cuda::DeviceBuffer msg_dev;
  std::vector<int32_t> msg;
  std::vector<CudaSeqStep> steps;
  // Vocab split, ranks > 0: where their logits go (discarded). Each rank must run the lm_head
  // wherever rank 0 does, since the lm_head ends in an all-gather; a prefill pass runs it only
  // for the steps that want logits, so these ranks get real destinations, not nullptr.
  std::vector<float> sink;
  float* sink_for(int64_t floats) {
    if (static_cast<int64_t>(sink.size()) < floats) sink.resize(floats);
    return sink.data();
  }
};

TpTransformer::TpTransformer(const Model& model, const TpOptions& o, int64_t capacity,
                             int64_t max_chunk, int max_seqs, TpSetupFn setup)
    : model_(model),
      opt_(o),
      plan_(plan_tensor_parallel(model, o.world,
                                 choose_tp_experts(o.experts, model.config(), o.world, false))),
      capacity_(capacity),
      max_chunk_(max_chunk),
      max_seqs_(max_seqs) {
  if (o.vocab_split && o.world > 1) split_vocab(plan_, model.config().vocab_size);
  // The step message does not say which steps want logits, which other nodes' ranks would
  // need to run the vocab-split lm_head where node 0's do.
  if (o.vocab_split && o.nnodes > 1) fail("a vocab-split lm_head runs on one node only");
  if (o.nnodes < 1 || o.world % o.nnodes != 0)
    fail("--tensor-parallel {} does not split over {} nodes", o.world, o.nnodes);
  if (o.node_rank < 0 || o.node_rank >= o.nnodes)
    fail("--node-rank {} is not in [0, {})", o.node_rank, o.nnodes);
  if (o.nnodes > 1 && o.master.empty()) fail("--nnodes {} needs --master ADDR:PORT", o.nnodes);
  if (o.world > 1 && !cuda::nccl_built()) cuda::nccl_unique_id();  // the one-line refusal
  const int local = o.world / o.nnodes;
  if (o.first_device < 0 || o.first_device + local > cuda::device_count())
    fail("--tensor-parallel {} on {} node(s) needs {} GPUs from GPU {}; {} visible", o.world,
         o.nnodes, local, o.first_device, cuda::device_count());
  // Several nodes: NCCL's bootstrap from NCCL_COMM_ID gives every process the same id.
  if (o.nnodes > 1) setenv("NCCL_COMM_ID", o.master.c_str(), 1);
  const std::string id = o.world > 1 ? cuda::nccl_unique_id() : std::string();
  for (int i = 0; i < local; ++i)
    shards_.push_back(shard_model(model, plan_, o.node_rank * local + i));
  // Each rank: device, setup, transformer; then, only if every local rank got that far, NCCL
  // (a rank failing after init would leave the others waiting in a collective).
  std::mutex m;
  std::condition_variable cv;
  int arrived = 0, failed = 0;
  for (int i = 0; i < local; ++i) {
    auto r = std::make_unique<Rank>();
    r->local = i, r->global = o.node_rank * local + i;
    Rank* rp = r.get();
    rp->thread = std::thread([this, rp, &m, &cv, &arrived, &failed, local, id, setup] {
      bool ok = true;
      try {
        cuda::set_device(opt_.first_device + rp->local);
        const Model& shard = *shards_[rp->local];
        if (setup) rp->setup = setup(rp->global, shard);
        rp->tf = std::make_unique<CudaTransformer>(shard, capacity_, max_chunk_,
                                                   rp->setup.offload, max_seqs_);
        rp->msg.resize(k_msg_head + 3 * max_seqs_ + max_chunk_);
        if (opt_.nnodes > 1) rp->msg_dev = cuda::DeviceBuffer(rp->msg.size() * sizeof(int32_t));
      } catch (...) {
        rp->error = std::current_exception();
        ok = false;
      }
      {
        std::unique_lock<std::mutex> lock(m);
        ++arrived;
        failed += !ok;
        cv.notify_all();
        cv.wait(lock, [&] { return arrived == local; });
      }
      if (failed == 0 && plan_.world > 1) {
        try {
          rp->comm = std::make_unique<cuda::Comm>(id, rp->global, plan_.world);
          const ModelConfig& c = model_.config();
          rp->tf->set_tp(rp->comm.get(), c.q_dim(), c.kv_dim());
          if (opt_.vocab_split) rp->tf->set_tp_vocab(tp_vocab_pad(c.vocab_size, plan_.world));
          cuda::DeviceBuffer warm(sizeof(float));  // NCCL connects before any graph capture
          rp->comm->all_reduce_sum(warm.as<float>(), 1);
          cuda::synchronize();
        } catch (...) {
          rp->error = std::current_exception();
        }
      }
      // The job loop.
      std::unique_lock<std::mutex> lock(rp->m);
      for (;;) {
        rp->cv.wait(lock, [&] { return rp->quit || rp->busy; });
        if (rp->quit) break;
        lock.unlock();
        try {
          rp->job(*rp);
        } catch (...) {
          rp->error = std::current_exception();
        }
        lock.lock();
        rp->busy = false;
        rp->cv.notify_all();
      }
      rp->tf.reset();
      rp->comm.reset();
      rp->setup = {};
    });
    ranks_.push_back(std::move(r));
  }
  {
    std::unique_lock<std::mutex> lock(m);
    cv.wait(lock, [&] { return arrived == local; });
  }
  try {
    run_all([](Rank&) {});  // waits for NCCL start-up; rethrows the first error
  } catch (...) {
    stop_threads();
    throw;
  }
}

TpTransformer::~TpTransformer() {
  try {
    if (opt_.nnodes > 1 && opt_.node_rank == 0 && !stopped_) step({}, nullptr, true);
  } catch (...) {
  }
  stop_threads();
}

void TpTransformer::stop_threads() {
  for (auto& r : ranks_) {
    {
      std::lock_guard<std::mutex> lock(r->m);
      r->quit = true;
    }
    r->cv.notify_all();
    r->thread.join();
  }
}

void TpTransformer::run_all(const std::function<void(Rank&)>& job) {
  for (auto& r : ranks_) {
    std::lock_guard<std::mutex> lock(r->m);
    r->job = job;
    r->busy = true;
    r->cv.notify_all();
  }
  std::exception_ptr first;
  for (auto& r : ranks_) {
    std::unique_lock<std::mutex> lock(r->m);
    r->cv.wait(lock, [&] { return !r->busy; });
    if (r->error && !first) first = r->error;
    r->error = nullptr;
  }
  if (first) std::rethrow_exception(first);
}

const CudaTransformer& TpTransformer::rank(int i) const {
  FT_CHECK(i >= 0 && i < local_ranks() && ranks_[i]->tf, "TpTransformer: rank {}", i);
  return *ranks_[i]->tf;
}

size_t TpTransformer::weight_bytes() const {
  size_t b = 0;
  for (const auto& r : ranks_) b += r->tf ? r->tf->weight_bytes() : 0;
  return b;
}

void TpTransformer::set_graphs(bool on) {
  for (auto& r : ranks_)
    if (r->tf) r->tf->set_graphs(on);
}

void TpTransformer::validate(std::span<const CudaSeqStep> steps) const {
  check_steps(steps, max_seqs_, capacity_, max_chunk_, model_.config().vocab_size);
}

// One pass. logits_all (with one step): [n, vocab] of every token, as CudaTransformer::forward.
void TpTransformer::step(std::span<const CudaSeqStep> steps, float* logits_all, bool quit) {
  const bool several = opt_.nnodes > 1;
  const int64_t V = model_.config().vocab_size;
  const int32_t kind = quit ? MSG_QUIT : logits_all ? MSG_FORWARD : MSG_BATCH;
  run_all([&](Rank& r) {
    const bool root = r.global == 0;
    int32_t* msg = r.msg.data();
    if (several) {
      if (root) {  // pack, send
        int64_t total = 0, at = k_msg_head;
        for (const CudaSeqStep& s : steps) {
          msg[at++] = s.seq, msg[at++] = static_cast<int32_t>(s.n);
          msg[at++] = static_cast<int32_t>(s.pos0);
          total += s.n;
        }
        for (const CudaSeqStep& s : steps) std::memcpy(msg + at, s.ids, s.n * 4), at += s.n;
        msg[0] = kind, msg[1] = static_cast<int32_t>(steps.size()), msg[2] = logits_all != nullptr;
        msg[3] = static_cast<int32_t>(total);
        cuda::copy_to_device(r.msg_dev.data(), msg, at * sizeof(int32_t));
      }
      r.comm->broadcast(r.msg_dev.data(), r.msg.size() * sizeof(int32_t), 0);
      cuda::copy_to_host(msg, r.msg_dev.data(), r.msg.size() * sizeof(int32_t));
      if (msg[0] == MSG_QUIT) return;
      r.steps.clear();
      int64_t at = k_msg_head, ids = k_msg_head + 3 * msg[1];
      for (int32_t i = 0; i < msg[1]; ++i, at += 3) {
        r.steps.push_back({.seq = msg[at], .ids = msg + ids, .n = msg[at + 1], .pos0 = msg[at + 2],
                           .logits = root ? steps[i].logits : nullptr});
        ids += msg[at + 1];
      }
    } else {
      r.steps.assign(steps.begin(), steps.end());
      if (!root)
        for (CudaSeqStep& s : r.steps)
          s.logits = s.logits && opt_.vocab_split ? r.sink_for(V) : nullptr;
    }
    if (several ? msg[0] == MSG_FORWARD : kind == MSG_FORWARD) {  // every token's logits
      const CudaSeqStep& s = r.steps[0];
      float* out = root ? logits_all : opt_.vocab_split ? r.sink_for(s.n * V) : nullptr;
      r.tf->forward(s.ids, s.n, s.pos0, out, root || opt_.vocab_split);
    } else {
      r.tf->forward_batch(r.steps);
    }
  });
}

void TpTransformer::forward(const int32_t* ids, int64_t n, int64_t pos0, float* logits,
                            bool all_logits) {
  FT_CHECK(opt_.node_rank == 0, "forward on node {}: only node 0 drives", opt_.node_rank);
  if (n <= 0) fail("forward: no tokens");
  const int64_t V = model_.config().vocab_size;
  for (int64_t s = 0; s < n; s += max_chunk_) {
    const int64_t m = std::min(max_chunk_, n - s);
    const CudaSeqStep st{.seq = 0,
                         .ids = ids + s,
                         .n = m,
                         .pos0 = pos0 + s,
                         .logits = !all_logits && s + m == n ? logits : nullptr};
    validate({&st, 1});
    step({&st, 1}, all_logits ? logits + s * V : nullptr);
  }
}

void TpTransformer::forward_batch(std::span<const CudaSeqStep> steps) {
  FT_CHECK(opt_.node_rank == 0, "forward_batch on node {}: only node 0 drives", opt_.node_rank);
  validate(steps);
  step(steps, nullptr);
}

void TpTransformer::serve_worker() {
  FT_CHECK(opt_.node_rank > 0, "serve_worker runs on nodes > 0");
  // Every local rank loops on its own thread until the quit message.
  run_all([](Rank& r) {
    for (;;) {
      r.comm->broadcast(r.msg_dev.data(), r.msg.size() * sizeof(int32_t), 0);
      cuda::copy_to_host(r.msg.data(), r.msg_dev.data(), r.msg.size() * sizeof(int32_t));
      const int32_t* msg = r.msg.data();
      if (msg[0] == MSG_QUIT) return;
      r.steps.clear();
      int64_t at = k_msg_head, ids = k_msg_head + 3 * msg[1];
      for (int32_t i = 0; i < msg[1]; ++i, at += 3) {
        r.steps.push_back({.seq = msg[at], .ids = msg + ids, .n = msg[at + 1],
                           .pos0 = msg[at + 2], .logits = nullptr});
        ids += msg[at + 1];
      }
      if (msg[0] == MSG_FORWARD) {  // the same collectives as node 0's all-logits pass
        r.tf->forward(r.steps[0].ids, r.steps[0].n, r.steps[0].pos0, nullptr, false);
      } else {
        r.tf->forward_batch(r.steps);
      }
    }
  });
  stopped_ = true;
}

}  // namespace ft
