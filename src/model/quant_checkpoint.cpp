// FP8 block-scaled and ModelOpt NVFP4 / FP8 safetensors checkpoints -> quantized TensorViews.
#include "model/quant_checkpoint.h"

#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "base/half.h"
#include "io/mmap.h"
#include "quant/quant.h"

namespace ft {

namespace {

std::string shape_str(std::initializer_list<int64_t> shape) {
  std::string s = "[";
  for (int64_t d : shape) s += (s.size() > 1 ? ", " : "") + std::to_string(d);
  return s + "]";
}

bool same_shape(const TensorView& v, std::initializer_list<int64_t> shape) {
  if (v.ndim != static_cast<int>(shape.size())) return false;
  int i = 0;
  for (int64_t d : shape)
    if (v.shape[i++] != d) return false;
  return true;
}

float scalar_f32(const SafetensorsSet& files, const TensorView& v) {
  if (v.numel() != 1)
    fail("{}: tensor '{}' must hold one value (a per-tensor scale), has shape {}", files.dir(),
         v.name, v.shape_str());
  switch (v.dtype) {
    case DType::F32: {
      float f;
      std::memcpy(&f, v.data, 4);
      return f;
    }
    case DType::BF16:
      return bf16_to_f32(*v.as<uint16_t>());
    case DType::F16:
      return f16_to_f32(*v.as<uint16_t>());
    default:
      fail("{}: scale '{}' has dtype {}; expected F32, BF16 or F16", files.dir(), v.name,
           dtype_name(v.dtype));
  }
}

// Block scales as f32: the file's own bytes when they are F32, else converted into `owned`.
const float* scales_f32(const SafetensorsSet& files, const TensorView& s,
                        std::vector<std::vector<uint8_t>>& owned) {
  if (s.dtype == DType::F32) return s.as<float>();
  if (s.dtype != DType::BF16 && s.dtype != DType::F16)
    fail("{}: scale '{}' has dtype {}; expected F32, BF16 or F16", files.dir(), s.name,
         dtype_name(s.dtype));
  auto& buf = owned.emplace_back(static_cast<size_t>(s.numel()) * 4);
  auto* f = reinterpret_cast<float*>(buf.data());
  const auto* h = s.as<uint16_t>();
  for (int64_t i = 0; i < s.numel(); ++i)
    f[i] = s.dtype == DType::BF16 ? bf16_to_f32(h[i]) : f16_to_f32(h[i]);
  return f;
}

TensorView fp8_view(const SafetensorsSet& files, const TensorView& w, const std::string& base,
                    std::initializer_list<int64_t> shape,
                    std::vector<std::vector<uint8_t>>& owned) {
  if (!same_shape(w, shape))
    fail(
        "{}: tensor '{}' has shape {} but config.json implies {}; the weights do not match the "
        "config",
        files.dir(), w.name, w.shape_str(), shape_str(shape));
  const int64_t rows = w.shape[w.ndim - 2], cols = w.shape[w.ndim - 1];
  const int64_t planes = w.ndim == 3 ? w.shape[0] : 1;
  const int64_t per_plane = quant::fp8_b128_scale_count(rows, cols);
  TensorView v = w;
  v.dtype = DType::F8_E4M3_B128;
  if (const TensorView* s = files.find(base + ".weight_scale_inv")) {
    const int64_t sr = (rows + 127) / 128, sc = (cols + 127) / 128;
    const bool ok = w.ndim == 3 ? same_shape(*s, {planes, sr, sc}) : same_shape(*s, {sr, sc});
    if (!ok)
      fail("{}: '{}' has shape {}; 128x128 block scales of a {} weight need {}", files.dir(),
           s->name, s->shape_str(), w.shape_str(),
           w.ndim == 3 ? shape_str({planes, sr, sc}) : shape_str({sr, sc}));
    v.scale_inv = scales_f32(files, *s, owned);
    return v;
  }
  const TensorView* s = files.find(base + ".weight_scale");
  if (!s)
    fail(
        "{}: '{}' is F8_E4M3 but has no '{}.weight_scale_inv' (128x128 block scales) or "
        "'{}.weight_scale' (per-tensor scale)",
        files.dir(), w.name, base, base);
  const float scale = scalar_f32(files, *s);
  auto& buf = owned.emplace_back(static_cast<size_t>(planes * per_plane) * 4);
  auto* f = reinterpret_cast<float*>(buf.data());
  std::fill_n(f, planes * per_plane, scale);
  v.scale_inv = f;
  return v;
}

TensorView nvfp4_view(const SafetensorsSet& files, const TensorView& w, const std::string& base,
                      std::initializer_list<int64_t> shape,
                      std::vector<std::vector<uint8_t>>& owned) {
  std::vector<int64_t> want(shape);
  const int64_t rows = want[want.size() - 2], cols = want.back();
  const int64_t planes = want.size() == 3 ? want[0] : 1;
  if (cols % 16)
    fail("{}: NVFP4 tensor '{}' has rows of {} elements, not a multiple of 16", files.dir(), w.name,
         cols);
  auto packed_ok = [&](const TensorView& t, int64_t inner) {
    return want.size() == 3 ? same_shape(t, {planes, rows, inner}) : same_shape(t, {rows, inner});
  };
  if (!packed_ok(w, cols / 2))
    fail(
        "{}: NVFP4 tensor '{}' has shape {} but config.json implies {} (packed two per byte: "
        "{} bytes a row)",
        files.dir(), w.name, w.shape_str(), shape_str(shape), cols / 2);
  const TensorView& s = files.get(base + ".weight_scale");
  if (s.dtype != DType::F8_E4M3 || !packed_ok(s, cols / 16))
    fail("{}: '{}' is {} {}; NVFP4 needs F8_E4M3 scales, one per 16 elements ({} a row)",
         files.dir(), s.name, dtype_name(s.dtype), s.shape_str(), cols / 16);
  const float global = scalar_f32(files, files.get(base + ".weight_scale_2"));
  const size_t plane_bytes =
      static_cast<size_t>(rows) * quant::row_bytes(quant::QuantType::NVFP4, cols);
  auto& buf = owned.emplace_back(plane_bytes * planes);
  for (int64_t p = 0; p < planes; ++p)
    quant::nvfp4_from_modelopt(w.as<uint8_t>() + p * rows * (cols / 2),
                               s.as<uint8_t>() + p * rows * (cols / 16), rows, cols,
                               buf.data() + p * plane_bytes);
  TensorView v = w;
  v.dtype = DType::NVFP4;
  v.ndim = static_cast<int>(want.size());
  for (size_t i = 0; i < want.size(); ++i) v.shape[i] = want[i];
  v.data = buf.data();
  v.global_scale = global;
  return v;
}

std::string lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

std::string modelopt_scheme(const std::string& where, const nlohmann::json& q) {
  const std::string algo = q.value("quant_algo", std::string());
  const std::string up = lower(algo);
  if (up == "nvfp4") {
    const int64_t group = q.value("group_size", int64_t{16});
    if (group != 16)
      fail("{}: NVFP4 group_size {} is not supported (ModelOpt NVFP4 uses 16)", where, group);
    return "modelopt:NVFP4";
  }
  if (up == "fp8") return "modelopt:FP8";
  fail(
      "{}: ModelOpt quant_algo '{}' is not supported (supported: NVFP4, FP8); convert the "
      "original checkpoint with ft quantize instead",
      where, algo);
}
}  // namespace

std::string checkpoint_quant_scheme(const std::string& dir, const nlohmann::json& config) {
  const std::string hf_quant = dir + "/hf_quant_config.json";
  if (file_exists(hf_quant)) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(read_file(hf_quant));
    } catch (const nlohmann::json::exception& e) {
      fail("{}: not valid JSON ({})", hf_quant, e.what());
    }
    if (j.contains("quantization") && j["quantization"].is_object())
      return modelopt_scheme(hf_quant, j["quantization"]);
  }
  if (!config.contains("quantization_config") || !config["quantization_config"].is_object())
    return "";
  const auto& q = config["quantization_config"];
  const std::string where = dir + "/config.json quantization_config";
  const std::string method = lower(q.value("quant_method", std::string()));
  if (method == "fp8") {
    if (q.contains("fmt") && lower(q["fmt"].get<std::string>()) != "e4m3")
      fail("{}: FP8 fmt '{}' is not supported (only e4m3)", where, q["fmt"].dump());
    const auto bs = q.value("weight_block_size", nlohmann::json());
    if (bs != nlohmann::json::array({128, 128}))
      fail("{}: FP8 weight_block_size {} is not supported (only [128, 128] block scales)", where,
           bs.is_null() ? std::string("(none: per-tensor)") : bs.dump());
    return "fp8";
  }
  if (method == "modelopt") return modelopt_scheme(where, q);
  // gpt-oss: the experts' *_blocks / *_scales are read by the family's loader (oss_experts).
  if (method == "mxfp4") return "mxfp4";
  fail(
      "{}: quant_method '{}' is not supported (supported: fp8 with 128x128 blocks, modelopt "
      "NVFP4/FP8, mxfp4 (gpt-oss experts)); use the original checkpoint or a GGUF",
      where, q.value("quant_method", std::string()));
}

bool quantized_view(const SafetensorsSet& files, const std::string& name,
                    std::initializer_list<int64_t> shape, std::vector<std::vector<uint8_t>>& owned,
                    TensorView* out) {
  const TensorView* w = files.find(name);
  if (!w) return false;
  const std::string suffix = ".weight";
  const std::string base = name.size() > suffix.size() && name.compare(name.size() - suffix.size(),
                                                                       suffix.size(), suffix) == 0
                               ? name.substr(0, name.size() - suffix.size())
                               : name;
  if (w->dtype == DType::F8_E4M3) {
    *out = fp8_view(files, *w, base, shape, owned);
    return true;
  }
  if (w->dtype == DType::U8 && files.has(base + ".weight_scale")) {
    *out = nvfp4_view(files, *w, base, shape, owned);
    return true;
  }
  return false;
}

TensorView dequantized_f32(const TensorView& q, std::vector<std::vector<uint8_t>>& owned) {
  FT_CHECK(q.ndim == 2, "{}: dequantized_f32 takes a matrix", q.name);
  const int64_t rows = q.shape[0], cols = q.shape[1];
  auto& buf = owned.emplace_back(static_cast<size_t>(rows * cols) * 4);
  quant::dequantize_rows(q, 0, rows, reinterpret_cast<float*>(buf.data()));
  TensorView v = q;
  v.dtype = DType::F32;
  v.data = buf.data();
  v.scale_inv = nullptr;
  v.global_scale = 1.f;
  return v;
}

}  // namespace ft
