// Tensor parallelism over NCCL: one model split across GPUs (parallel/tp_plan.h), one thread per
// local GPU driving that rank's CudaTransformer over its shard; passes run on every rank at
// once and logits come from rank 0. With several nodes (hosts), each process holds its local
// ranks; node 0 broadcasts every step's inputs (NCCL) and the other nodes replay them
// (serve_worker). Plain C++ over the CUDA runner's headers; CUDA builds only.
#pragma once
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "model/cuda_transformer.h"
#include "parallel/tp_plan.h"

namespace ft {

struct TpOptions {
  int world = 1;             // ranks in all, world / nnodes on each node
  int nnodes = 1, node_rank = 0;
  std::string master;        // ADDR:PORT of node 0's NCCL bootstrap (several nodes)
  int first_device = 0;      // local rank i runs on GPU first_device + i
  // Routed experts: column slices of every expert, or whole experts per rank (tp_plan.h;
  // AUTO: choose_tp_experts for a resident model).
  TpExperts experts = TpExperts::SLICE;
  // lm_head rows split over the ranks (tp_plan.h split_vocab), logits all-gathered; off: every
  // rank holds the whole lm_head.
  bool vocab_split = false;
};

// What a rank runs with, made by the caller on the rank's thread and device (so a planner can
// measure that GPU): the offload settings, and whatever they point to (e.g. the rank's
// HostExperts), kept alive with the rank.
struct TpRankSetup {
  CudaOffload offload;
  std::shared_ptr<void> keep;
};
using TpSetupFn = std::function<TpRankSetup(int rank, const Model& shard)>;

class TpTransformer {
 public:
  // Plans and shards `model` (outlives this), starts the local ranks (NCCL init, upload,
  // a warm-up all-reduce). capacity / max_chunk / max_seqs as CudaTransformer's, per rank.
  // Throws ft::Error for a model the plan refuses, a bad layout or a build without NCCL.
  TpTransformer(const Model& model, const TpOptions& o, int64_t capacity, int64_t max_chunk = 256,
                int max_seqs = 1, TpSetupFn setup = {});
  ~TpTransformer();  // node 0 of several: tells the other nodes to stop first

  // CudaTransformer's contracts; node 0 only. Inputs are validated before any rank starts.
  void forward(const int32_t* ids, int64_t n, int64_t pos0, float* logits, bool all_logits);
  void forward_batch(std::span<const CudaSeqStep> steps);
  // Nodes > 0: runs the passes node 0 broadcasts until its TpTransformer is destroyed.
  void serve_worker();

  void set_graphs(bool on);
  int world() const { return plan_.world; }
  int local_ranks() const { return static_cast<int>(ranks_.size()); }
  const TpPlan& plan() const { return plan_; }
  // Local rank i's transformer (its shard, stats and expert store).
  const CudaTransformer& rank(int i) const;
  int64_t capacity() const { return capacity_; }
  int64_t max_chunk() const { return max_chunk_; }
  int max_seqs() const { return max_seqs_; }
  size_t weight_bytes() const;  // local ranks together

 private:
  struct Rank;
  // Runs job(rank, is_root) on every local rank's thread and waits; rethrows the first error.
  void run_all(const std::function<void(Rank&)>& job);
  // One pass of up to max_chunk tokens; with several nodes the message goes to every rank.
  void step(std::span<const CudaSeqStep> steps, float* logits_all, bool quit = false);
  void validate(std::span<const CudaSeqStep> steps) const;
  void stop_threads();

  const Model& model_;
  TpOptions opt_;
  TpPlan plan_;
  int64_t capacity_, max_chunk_;
  int max_seqs_;
  std::vector<std::unique_ptr<Model>> shards_;
  std::vector<std::unique_ptr<Rank>> ranks_;
  bool stopped_ = false;
};

}  // namespace ft
