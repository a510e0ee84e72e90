// measure_h2d / measure_hbm: timed copies through the CUDA runtime's wrappers (no CUDA headers).
#include "experts/bw_devices.h"

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>

#include "backend/cuda/cuda_ops.h"
#include "base/error.h"
#include "base/timer.h"

namespace ft {

namespace {
// One device's copy loop: buffers made on its thread, `rounds` timed rounds of `reps` copies;
// before each round every device of the run waits at the gate (all start together).
struct Gate {
  std::mutex m;
  std::condition_variable cv;
  int arrived = 0, round = 0, parties = 1;
  void wait(int r) {  // round r starts when all parties have arrived for it
    std::unique_lock<std::mutex> lock(m);
    if (++arrived == parties * (r + 1)) {
      round = r + 1;
      cv.notify_all();
    }
    cv.wait(lock, [&] { return round > r; });
  }
};

// entered: rounds passed through the gate (a failing device still passes the rest).
double copy_loop(int device, size_t bytes, int reps, int rounds, Gate& gate, int& entered) {
  cuda::set_device(device);
  cuda::PinnedBuffer src(bytes);
  cuda::DeviceBuffer dst(bytes);
  cuda::CopyStream s;
  s.copy_to_device(dst.data(), src.data(), bytes);  // warm-up: mappings, clocks
  s.synchronize();
  double best = 0;
  for (int r = 0; r < rounds; ++r) {
    gate.wait(r);
    entered = r + 1;
    Timer t;
    for (int i = 0; i < reps; ++i) s.copy_to_device(dst.data(), src.data(), bytes);
    s.synchronize();
    best = std::max(best, double(bytes) * reps / t.seconds());
  }
  return best;
}

std::vector<double> run(const std::vector<int>& devices, size_t bytes, int reps, int rounds) {
  Gate gate;
  gate.parties = static_cast<int>(devices.size());
  std::vector<double> out(devices.size());
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(devices.size());
  for (size_t i = 0; i < devices.size(); ++i)
    threads.emplace_back([&, i] {
      int entered = 0;
      try {
        out[i] = copy_loop(devices[i], bytes, reps, rounds, gate, entered);
      } catch (...) {
        errors[i] = std::current_exception();
        for (int r = entered; r < rounds; ++r) gate.wait(r);  // the others must not wait forever
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  return out;
}
}  // namespace

H2dBandwidth measure_h2d(const std::vector<int>& devices, size_t bytes, int reps, int rounds) {
  FT_CHECK(!devices.empty() && bytes > 0 && reps > 0 && rounds > 0, "measure_h2d: bad args");
  for (int d : devices)
    if (d < 0 || d >= cuda::device_count())
      fail("GPU {} is not visible ({} visible)", d, cuda::device_count());
  H2dBandwidth b;
  for (int d : devices) b.alone.push_back(run({d}, bytes, reps, rounds)[0]);
  b.concurrent = devices.size() > 1 ? run(devices, bytes, reps, rounds) : b.alone;
  return b;
}

double measure_hbm(size_t bytes, int reps) {
  cuda::DeviceBuffer a(bytes), b(bytes);
  cuda::memset_async(a.data(), 0, bytes);
  cuda::copy_on_device(b.data(), a.data(), bytes);  // warm-up
  cuda::synchronize();
  double best = 0;
  for (int i = 0; i < reps; ++i) {
    Timer t;
    cuda::copy_on_device(b.data(), a.data(), bytes);
    cuda::synchronize();
    best = std::max(best, 2.0 * double(bytes) / t.seconds());
  }
  return best;
}

}  // namespace ft
