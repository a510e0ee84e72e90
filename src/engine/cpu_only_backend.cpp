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

}  // namespace ft
