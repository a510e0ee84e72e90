// CudaTransformer's per-step time split: timing events at phase boundaries of a timed pass
// (every prefill pass, a sample of decode passes), added into CudaRuntimeStats.
#include "model/cuda_transformer.h"

namespace ft {

void CudaTransformer::timing_begin(double weight) {
  timing_weight_ = weight;
  marks_.clear();
  mark(StepPhase::OTHER);
}

void CudaTransformer::mark(StepPhase phase) {
  if (timing_weight_ <= 0) return;
  const size_t i = marks_.size();
  if (i == mark_events_.size()) mark_events_.push_back(std::make_unique<cuda::TimingEvent>());
  mark_events_[i]->record();
  marks_.push_back(phase);
}

void CudaTransformer::timing_end() {
  if (timing_weight_ <= 0) return;
  mark(StepPhase::OTHER);
  std::vector<double> seconds(marks_.size() - 1);
  for (size_t i = 0; i + 1 < marks_.size(); ++i)
    seconds[i] = mark_events_[i + 1]->seconds_since(*mark_events_[i]);
  StepSplit s;
  add_step_split(marks_, seconds, timing_weight_, s);
  rt_.t_attention += s.attention;
  rt_.t_routing += s.routing;
  rt_.t_hits += s.hits;
  rt_.t_fetch += s.fetch;
  timing_weight_ = 0;
}

}  // namespace ft
