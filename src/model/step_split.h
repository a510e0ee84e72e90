// The per-step time split of the CUDA runtime (attention, routing, expert hits, fetch): which
// passes are timed, and how the GPU times between phase marks add up. Plain C++ (tested on CPU).
// Decode steps replay CUDA graphs, which time nothing; so every `every`-th decode-sized pass
// runs eagerly with timing events at the phase boundaries and stands for `every` passes
// (weight). Prefill passes are eager anyway and are timed every time (weight 1).
#pragma once
#include <cstdint>
#include <span>

namespace ft {

enum class StepPhase : uint8_t { OTHER, ATTENTION, ROUTING, HITS, FETCH };

struct StepSplit {
  double attention = 0, routing = 0, hits = 0, fetch = 0, other = 0;  // seconds
};

// marks[i]: the phase that starts at mark i; seconds[i]: GPU time from mark i to mark i + 1
// (marks.size() - 1 values). Each interval, times weight, goes to its phase.
inline void add_step_split(std::span<const StepPhase> marks, std::span<const double> seconds,
                           double weight, StepSplit& s) {
  for (size_t i = 0; i + 1 < marks.size() && i < seconds.size(); ++i) {
    const double t = seconds[i] * weight;
    switch (marks[i]) {
      case StepPhase::ATTENTION:
        s.attention += t;
        break;
      case StepPhase::ROUTING:
        s.routing += t;
        break;
      case StepPhase::HITS:
        s.hits += t;
        break;
      case StepPhase::FETCH:
        s.fetch += t;
        break;
      case StepPhase::OTHER:
        s.other += t;
        break;
    }
  }
}

// Which decode-sized passes run eagerly and timed: the 1st, then every `every`-th (0: none).
class StepSampler {
 public:
  explicit StepSampler(int every = 32) : every_(every) {}
  // Counts one decode-sized pass; true when it is to be timed.
  bool next() { return every_ > 0 && count_++ % every_ == 0; }
  double weight() const { return every_; }
  void set_every(int every) { every_ = every, count_ = 0; }

 private:
  int every_;
  int64_t count_ = 0;
};

}  // namespace ft
