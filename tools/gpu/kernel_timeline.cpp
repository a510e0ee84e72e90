// kernel_timeline: a CUPTI injection library that writes every kernel's GPU start and end
// (ns), its graph id and its demangled name to $FT_TIMELINE_OUT (one line each, at exit), so a
// decode step replayed from a CUDA graph can be read kernel by kernel with its PDL overlaps:
// Nsight Systems is not on the GPU machine, and Nsight Compute serializes kernels.
//   g++ -O2 -shared -fPIC tools/gpu/kernel_timeline.cpp -I/usr/local/cuda/include \
//     -L/usr/local/cuda/lib64 -lcupti -o kernel_timeline.so
//   CUDA_INJECTION64_PATH=$PWD/kernel_timeline.so FT_TIMELINE_OUT=t.txt ft bench offload ...
//   python3 tools/gpu/kernel_timeline.py t.txt
#include <cupti.h>
#include <cxxabi.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

namespace {
struct Rec {
  uint64_t start, end;
  uint32_t graph;
  std::string name;
};
std::mutex mu;
std::vector<Rec> recs;

void CUPTIAPI request(uint8_t** buf, size_t* size, size_t* max_records) {
  *size = size_t{16} << 20;
  *buf = static_cast<uint8_t*>(std::aligned_alloc(8, *size));
  *max_records = 0;
}

void CUPTIAPI complete(CUcontext, uint32_t, uint8_t* buf, size_t, size_t valid) {
  CUpti_Activity* r = nullptr;
  std::lock_guard<std::mutex> lock(mu);
  while (cuptiActivityGetNextRecord(buf, valid, &r) == CUPTI_SUCCESS) {
    if (r->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) continue;
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(r);
    int st = 0;
    char* d = abi::__cxa_demangle(k->name, nullptr, nullptr, &st);
    recs.push_back({k->start, k->end, k->graphId, st == 0 && d ? d : k->name});
    std::free(d);
  }
  std::free(buf);
}

void finish() {
  cuptiActivityFlushAll(1);
  const char* path = std::getenv("FT_TIMELINE_OUT");
  FILE* f = std::fopen(path ? path : "kernel_timeline.txt", "w");
  if (!f) return;
  std::lock_guard<std::mutex> lock(mu);
  for (const Rec& r : recs)
    std::fprintf(f, "%llu %llu %u %s\n", static_cast<unsigned long long>(r.start),
                 static_cast<unsigned long long>(r.end), r.graph, r.name.c_str());
  std::fclose(f);
}
}  // namespace

extern "C" int InitializeInjection() {
  if (cuptiActivityRegisterCallbacks(request, complete) != CUPTI_SUCCESS ||
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
    std::fprintf(stderr, "kernel_timeline: CUPTI activity tracing unavailable\n");
    return 0;
  }
  std::atexit(finish);
  return 1;
}
