// Test helper: writes a quantized Hugging Face checkpoint from a float one, in the layouts the
// real releases use (FP8 e4m3 + weight_scale_inv 128x128 blocks as in Qwen3-*-FP8; ModelOpt
// NVFP4 weight/weight_scale/weight_scale_2/input_scale; ModelOpt per-tensor FP8). Stacked
// experts are written per expert, as those releases do. Embeddings, lm_head, norms and routers
// stay as they are.
#pragma once
#include <cmath>
#include <deque>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/half.h"
#include "io/mmap.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"
#include "quant/quant.h"
#include "quant/quantize.h"

namespace ft::test {

enum class HfQuant { FP8_BLOCK, NVFP4, FP8_TENSOR };

inline const char* hf_quant_name(HfQuant k) {
  return k == HfQuant::FP8_BLOCK ? "fp8_block" : k == HfQuant::NVFP4 ? "nvfp4" : "fp8_tensor";
}

class HfQuantWriter {
 public:
  HfQuantWriter(HfQuant kind, bool bf16_scales) : kind_(kind), bf16_scales_(bf16_scales) {}

  void write(const std::string& src, const std::string& out) {
    namespace fs = std::filesystem;
    fs::create_directories(out);
    for (const auto& e : fs::directory_iterator(src)) {
      const std::string n = e.path().filename().string();
      if (n.find(".safetensors") != std::string::npos || n == "config.json" ||
          n.rfind("reference", 0) == 0)
        continue;
      fs::copy_file(e.path(), fs::path(out) / n, fs::copy_options::overwrite_existing);
    }
    write_config(src, out);
    const SafetensorsSet in = SafetensorsSet::open_dir(src);
    for (const std::string& name : in.names()) {
      const TensorView& t = in.get(name);
      const std::string stacked = t.ndim == 3 ? stacked_kind(name) : "";
      if (!stacked.empty()) {
        const std::string p = name.substr(0, name.size() - stacked.size());  // "...experts."
        for (int64_t e = 0; e < t.shape[0]; ++e) {
          const TensorView s = t.slice0(e);
          if (stacked == "gate_up_proj") {
            const int64_t half = s.shape[0] / 2;
            add_linear(p + std::to_string(e) + ".gate_proj", s.rows(0, half));
            add_linear(p + std::to_string(e) + ".up_proj", s.rows(half, 2 * half));
          } else {
            add_linear(p + std::to_string(e) + ".down_proj", s);
          }
        }
      } else if (t.ndim == 2 && is_linear(name)) {
        add_linear(name.substr(0, name.size() - 7), t);  // minus ".weight"
      } else {
        out_.push_back(t);
      }
    }
    write_safetensors(out + "/model.safetensors", out_);
  }

 private:
  HfQuant kind_;
  bool bf16_scales_;
  std::vector<TensorView> out_;
  std::deque<std::vector<uint8_t>> bufs_;

  static bool ends_with(const std::string& s, const std::string& t) {
    return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
  }
  static std::string stacked_kind(const std::string& name) {
    if (ends_with(name, "experts.gate_up_proj")) return "gate_up_proj";
    if (ends_with(name, "experts.down_proj")) return "down_proj";
    return "";
  }
  // Projections and mixtral's w1/w2/w3: not embeddings, lm_head, norms or routers.
  static bool is_linear(const std::string& n) {
    if (!ends_with(n, ".weight") || n.find("model.visual.") == 0) return false;
    return n.find("_proj.") != std::string::npos || ends_with(n, ".w1.weight") ||
           ends_with(n, ".w2.weight") || ends_with(n, ".w3.weight");
  }

  void write_config(const std::string& src, const std::string& out) const {
    nlohmann::json c = nlohmann::json::parse(read_file(src + "/config.json"));
    if (kind_ == HfQuant::FP8_BLOCK) {
      c["quantization_config"] = {{"activation_scheme", "dynamic"},
                                  {"fmt", "e4m3"},
                                  {"quant_method", "fp8"},
                                  {"weight_block_size", {128, 128}}};
    } else {
      const char* algo = kind_ == HfQuant::NVFP4 ? "NVFP4" : "FP8";
      nlohmann::json q = {{"quant_algo", algo}, {"exclude_modules", {"lm_head"}}};
      if (kind_ == HfQuant::NVFP4) q["group_size"] = 16;
      nlohmann::json hf = {{"producer", {{"name", "modelopt"}}}, {"quantization", q}};
      std::ofstream(out + "/hf_quant_config.json") << hf.dump(2);
      q["quant_method"] = "modelopt";
      c["quantization_config"] = q;
    }
    std::ofstream(out + "/config.json") << c.dump(2);
  }

  TensorView add(const std::string& name, DType dt, std::vector<int64_t> shape,
                 std::vector<uint8_t> bytes) {
    bufs_.push_back(std::move(bytes));
    TensorView v;
    v.dtype = dt;
    v.ndim = static_cast<int>(shape.size());
    for (size_t i = 0; i < shape.size(); ++i) v.shape[i] = shape[i];
    v.data = bufs_.back().data();
    v.name = name;
    out_.push_back(v);
    return v;
  }
  template <class T>
  static std::vector<uint8_t> bytes_of(const std::vector<T>& v) {
    std::vector<uint8_t> b(v.size() * sizeof(T));
    std::memcpy(b.data(), v.data(), b.size());
    return b;
  }
  void add_scalar(const std::string& name, float f) {
    add(name, DType::F32, {}, bytes_of(std::vector<float>{f}));
  }

  void add_linear(const std::string& base, const TensorView& t) {
    const int64_t rows = t.shape[0], cols = t.shape[1];
    std::vector<float> w(rows * cols);
    quant::dequantize_rows(t, 0, rows, w.data());
    float amax = 0;
    for (float x : w) amax = std::max(amax, std::fabs(x));
    if (kind_ == HfQuant::FP8_BLOCK) {
      std::vector<uint8_t> q(rows * cols);
      std::vector<float> s(quant::fp8_b128_scale_count(rows, cols));
      quant::quantize_fp8_b128(w.data(), rows, cols, q.data(), s.data());
      add(base + ".weight", DType::F8_E4M3, {rows, cols}, std::move(q));
      const std::vector<int64_t> ss{(rows + 127) / 128, (cols + 127) / 128};
      if (bf16_scales_) {
        std::vector<uint16_t> h(s.size());
        for (size_t i = 0; i < s.size(); ++i) h[i] = f32_to_bf16(s[i]);
        add(base + ".weight_scale_inv", DType::BF16, ss, bytes_of(h));
      } else {
        add(base + ".weight_scale_inv", DType::F32, ss, bytes_of(s));
      }
    } else if (kind_ == HfQuant::FP8_TENSOR) {
      const float scale = amax > 0 ? amax / 448.f : 1.f;
      std::vector<uint8_t> q(rows * cols);
      for (size_t i = 0; i < w.size(); ++i) q[i] = quant::f32_to_e4m3(w[i] / scale);
      add(base + ".weight", DType::F8_E4M3, {rows, cols}, std::move(q));
      add_scalar(base + ".weight_scale", scale);
      add_scalar(base + ".input_scale", 1.f);
    } else {
      const float global = quant::nvfp4_global_scale(amax);
      std::vector<quant::BlockNVFP4> blocks(rows * cols / 16);
      quant::quantize_row(quant::QuantType::NVFP4, w.data(), blocks.data(), rows * cols, global);
      std::vector<uint8_t> packed(rows * cols / 2), scales(rows * cols / 16);
      for (size_t b = 0; b < blocks.size(); ++b) {
        scales[b] = blocks[b].d;
        std::memcpy(packed.data() + 8 * b, blocks[b].qs, 8);
      }
      add(base + ".weight", DType::U8, {rows, cols / 2}, std::move(packed));
      add(base + ".weight_scale", DType::F8_E4M3, {rows, cols / 16}, std::move(scales));
      add_scalar(base + ".weight_scale_2", global);
      add_scalar(base + ".input_scale", 1.f);
    }
  }
};

}  // namespace ft::test
