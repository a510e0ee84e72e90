// Host -> GPU bandwidth of every GPU alone and of all of them copying at once (their PCIe
// links share the host's root complex and memory), and a GPU's own memory bandwidth: what
// `ft bench bw` records for tensor parallelism and tp_bench's bounds use. CUDA builds only.
#pragma once
#include <cstddef>
#include <vector>

namespace ft {

// Bytes/s per device, in the order of `devices`.
struct H2dBandwidth {
  std::vector<double> alone, concurrent;
};
// Pinned host -> device copies of `bytes` (one pinned buffer and copy stream per device),
// `reps` per round, the best of `rounds` rounds: each device alone, then all devices at once
// (one thread each, released together; each timed over its own copies).
H2dBandwidth measure_h2d(const std::vector<int>& devices, size_t bytes = size_t{256} << 20,
                         int reps = 12, int rounds = 3);
// Device-to-device copies on the current device: (read + write) bytes/s, best of `reps`.
double measure_hbm(size_t bytes = size_t{1} << 30, int reps = 10);

}  // namespace ft
