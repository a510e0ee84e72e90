// make_runner in a build without the CUDA backend: the CPU runner, and a clear refusal of the
// GPU backends.
#include "base/error.h"
#include "base/log.h"
#include "engine/backend.h"
#include "experts/bw_profile.h"

namespace ft {

std::unique_ptr<Runner> make_runner(const Model& model, EngineOptions& opt,
                                    const BackendOptions& b) {
  validate_backend_options(b);
  if (b.tensor_parallel > 1 || b.nnodes > 1) make_tp_runner(model, opt, b);  // refuses
  const MoeBackend requested = parse_moe_backend(b.moe_backend);
  if (requested != MoeBackend::AUTO && requested != MoeBackend::CPU)
    fail("--moe-backend {} needs the CUDA backend, and this ft was built without it (no nvcc at "
         "configure time); use --moe-backend cpu or auto",
         moe_backend_name(requested));
  FT_LOG_INFO("moe backend: cpu ({})", requested == MoeBackend::CPU
                                           ? "requested"
                                           : "auto: built without the CUDA backend");
  return make_cpu_runner(model, opt.threads, opt.chunk, opt.max_running, opt.ctx_size);
}

std::unique_ptr<Runner> make_tp_runner(const Model&, EngineOptions&, const BackendOptions&) {
  fail("--tensor-parallel needs the CUDA backend with NCCL, and this ft was built without "
       "CUDA; use --tensor-parallel 1");
}

void serve_tp_worker(const Model& model, EngineOptions& opt, const BackendOptions& b) {
  make_tp_runner(model, opt, b);
}

}  // namespace ft
