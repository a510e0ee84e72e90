// Bandwidth profile: JSON read/write under the XDG cache directory and the backend decision.
#include "experts/bw_profile.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/error.h"

namespace ft {

const char* moe_backend_name(MoeBackend b) {
  switch (b) {
    case MoeBackend::AUTO: return "auto";
    case MoeBackend::FUSED: return "fused";
    case MoeBackend::OFFLOAD: return "offload";
    case MoeBackend::CPU: return "cpu";
    case MoeBackend::HYBRID: return "hybrid";
  }
  return "?";
}

MoeBackend parse_moe_backend(const std::string& s) {
  for (MoeBackend b : {MoeBackend::AUTO, MoeBackend::FUSED, MoeBackend::OFFLOAD, MoeBackend::CPU,
                       MoeBackend::HYBRID})
    if (s == moe_backend_name(b)) return b;
  fail("--moe-backend: '{}' is not a backend (choose auto, fused, offload, cpu or hybrid)", s);
}

double BwEntry::hybrid_fetch_fraction() const {
  if (pcie_overlap_gbs > 0 && cpu_overlap_gbs > 0)
    return pcie_overlap_gbs / (pcie_overlap_gbs + cpu_overlap_gbs);
  if (pcie_gather_gbs > 0 && cpu_expert_gbs > 0)
    return pcie_gather_gbs / (pcie_gather_gbs + cpu_expert_gbs);
  return 0;
}

double BwEntry::pcie_per_gpu_gbs(int world) const {
  const auto& a = pcie_gpu_alone_gbs;
  const auto& c = pcie_gpu_concurrent_gbs;
  const double alone = a.empty() ? pcie_linear_gbs : *std::min_element(a.begin(), a.end());
  if (world <= 1 || c.size() < 2) return alone;  // one GPU, or never measured together
  const double slowest = *std::min_element(c.begin(), c.end());
  const int measured = static_cast<int>(c.size());
  if (world <= measured) return slowest;
  double total = 0;
  for (double g : c) total += g;
  return std::min(slowest, total / world);  // more GPUs than measured share the total
}

std::string recommend_backend(const BwEntry& e) {
  const bool measured = e.offload_tokens_per_s > 0 && e.hybrid_tokens_per_s > 0;
  return measured && e.hybrid_tokens_per_s > k_hybrid_margin * e.offload_tokens_per_s ? "hybrid"
                                                                                       : "offload";
}

const BwEntry* BwProfile::find(const std::string& gpu, const std::string& format) const {
  auto g = gpus.find(gpu);
  if (g == gpus.end()) return nullptr;
  auto f = g->second.find(format);
  return f == g->second.end() ? nullptr : &f->second;
}

std::string bw_profile_path() {
  namespace fs = std::filesystem;
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  fs::path base;
  if (xdg && *xdg && fs::path(xdg).is_absolute()) {  // the spec ignores relative values
    base = xdg;
  } else {
    const char* home = std::getenv("HOME");
    if (!home || !*home) fail("cannot place the bandwidth profile: set HOME or XDG_CACHE_HOME");
    base = fs::path(home) / ".cache";
  }
  return (base / "ft" / "bw_profile.json").string();
}

namespace {
// Field list of an entry, declared once for both directions.
template <typename E, typename F>
void for_each_field(E& e, F&& f) {
  f("pcie_linear_gbs", e.pcie_linear_gbs);
  f("pcie_gather_gbs", e.pcie_gather_gbs);
  f("cpu_expert_gbs", e.cpu_expert_gbs);
  f("pcie_overlap_gbs", e.pcie_overlap_gbs);
  f("cpu_overlap_gbs", e.cpu_overlap_gbs);
  f("offload_tokens_per_s", e.offload_tokens_per_s);
  f("hybrid_tokens_per_s", e.hybrid_tokens_per_s);
  f("model", e.model);
  f("recommended", e.recommended);
  f("pcie_gpu_alone_gbs", e.pcie_gpu_alone_gbs);
  f("pcie_gpu_concurrent_gbs", e.pcie_gpu_concurrent_gbs);
}
}  // namespace

std::optional<BwProfile> read_bw_profile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  auto bad = [&](const std::string& why) -> BwProfile {
    fail("bandwidth profile {} is unusable ({}); rerun `ft bench bw` or delete the file", path,
         why);
  };
  nlohmann::json j;
  try {
    in >> j;
  } catch (const std::exception&) {
    return bad("not JSON");
  }
  if (!j.is_object() || j.value("version", 0) != BwProfile::k_version)
    return bad(fmt::format("expected version {}", BwProfile::k_version));
  BwProfile p;
  try {
    p.host = j.value("host", "");
    p.cpu = j.value("cpu", "");
    p.timestamp = j.value("timestamp", "");
    for (const auto& [gpu, formats] : j.at("gpus").items())
      for (const auto& [format, je] : formats.items()) {
        BwEntry e;
        for_each_field(e, [&](const char* k, auto& v) {
          if (je.contains(k)) v = je.at(k).get<std::decay_t<decltype(v)>>();
        });
        if (e.recommended != "hybrid" && e.recommended != "offload")
          e.recommended = recommend_backend(e);
        p.gpus[gpu][format] = e;
      }
  } catch (const nlohmann::json::exception& e) {
    return bad(e.what());
  }
  return p;
}

void write_bw_profile(const BwProfile& p, const std::string& path) {
  namespace fs = std::filesystem;
  nlohmann::json j = {{"version", BwProfile::k_version}, {"host", p.host}, {"cpu", p.cpu},
                      {"timestamp", p.timestamp}, {"gpus", nlohmann::json::object()}};
  for (const auto& [gpu, formats] : p.gpus)
    for (const auto& [format, e] : formats) {
      nlohmann::json je = nlohmann::json::object();
      for_each_field(e, [&](const char* k, const auto& v) { je[k] = v; });
      j["gpus"][gpu][format] = je;
    }
  std::error_code ec;
  const fs::path target(path);
  if (target.has_parent_path()) fs::create_directories(target.parent_path(), ec);
  if (ec) fail("cannot create {}: {}", target.parent_path().string(), ec.message());
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp);
    out << j.dump(2) << "\n";
    if (!out) fail("cannot write {}", tmp);
  }
  fs::rename(tmp, target, ec);
  if (ec) {
    fs::remove(tmp);
    fail("cannot write {}: {}", path, ec.message());
  }
}

BackendChoice choose_moe_backend(MoeBackend requested, bool cuda, bool experts_fit,
                                 const BwEntry* profile, bool cpu_share_ok) {
  BackendChoice c{requested, "requested"};
  if (profile) {
    const bool ov = profile->pcie_overlap_gbs > 0 && profile->cpu_overlap_gbs > 0;
    c.pcie_Bps = 1e9 * (ov ? profile->pcie_overlap_gbs : profile->pcie_gather_gbs);
    c.cpu_Bps = 1e9 * (ov ? profile->cpu_overlap_gbs : profile->cpu_expert_gbs);
  }
  if (requested != MoeBackend::AUTO) {
    if (requested != MoeBackend::CPU && !cuda)
      fail("--moe-backend {} needs a CUDA device (none usable here); use --moe-backend cpu or auto",
           moe_backend_name(requested));
    return c;
  }
  if (!cuda) return {MoeBackend::CPU, "auto: no CUDA device, the whole model runs on the CPU"};
  if (experts_fit) return {MoeBackend::FUSED, "auto: every expert fits the GPU budget"};
  if (!profile) {
    c.backend = MoeBackend::OFFLOAD;
    c.reason = "auto: experts do not fit and no bandwidth profile for this GPU (run `ft bench bw`)";
    return c;
  }
  if (recommend_backend(*profile) == "hybrid") {
    c.backend = cpu_share_ok ? MoeBackend::HYBRID : MoeBackend::OFFLOAD;
    c.reason = fmt::format("auto: the profile measured hybrid {:.2f} tok/s vs offload {:.2f}",
                           profile->hybrid_tokens_per_s, profile->offload_tokens_per_s);
    if (!cpu_share_ok) c.reason += "; offload: hybrid has no gpt-oss experts on the CPU share";
  } else {
    c.backend = MoeBackend::OFFLOAD;
    c.reason = profile->hybrid_tokens_per_s > 0
                   ? fmt::format("auto: the profile measured offload {:.2f} tok/s vs hybrid {:.2f}",
                                 profile->offload_tokens_per_s, profile->hybrid_tokens_per_s)
                   : "auto: the profile has no hybrid A/B, offload";
  }
  return c;
}

}  // namespace ft
