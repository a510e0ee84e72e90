// Fast-load checkpoint: writer (canonical weights -> 4 KiB-aligned data file + JSON index) and
// Model::load_ftc (one O_DIRECT read, then views).
#include "model/ft_checkpoint.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string_view>

#include "backend/cpu/thread_pool.h"
#include "base/error.h"
#include "base/half.h"
#include "base/log.h"
#include "io/direct_read.h"
#include "io/gguf.h"
#include "io/mmap.h"
#include "model/gguf_arch.h"
#include "model/gguf_export.h"
#include "model/weights_visit.h"
#include "quant/quant.h"

namespace ft {

namespace {

namespace fs = std::filesystem;
constexpr int k_version = 1;
constexpr size_t k_align = 4096;
size_t align_up(size_t n) { return (n + k_align - 1) / k_align * k_align; }

// ---- config -----------------------------------------------------------------------------------
// One list of the fields, used both ways.
template <class C, class Fn>
void visit_config(C& c, Fn&& f) {
  f("model_type", c.model_type);
  f("vocab_size", c.vocab_size);
  f("hidden", c.hidden);
  f("n_layers", c.n_layers);
  f("n_heads", c.n_heads);
  f("n_kv_heads", c.n_kv_heads);
  f("head_dim", c.head_dim);
  f("max_position", c.max_position);
  f("rms_eps", c.rms_eps);
  f("rope.type", c.rope.type);
  f("rope.theta", c.rope.theta);
  f("rope.factor", c.rope.factor);
  f("rope.original_max_pos", c.rope.original_max_pos);
  f("rope.beta_fast", c.rope.beta_fast);
  f("rope.beta_slow", c.rope.beta_slow);
  f("rope.attention_factor", c.rope.attention_factor);
  f("rope.mscale", c.rope.mscale);
  f("rope.mscale_all_dim", c.rope.mscale_all_dim);
  f("rope.truncate", c.rope.truncate);
  f("rope.partial_rotary_factor", c.rope.partial_rotary_factor);
  f("rope.interleaved", c.rope.interleaved);
  f("qk_norm", c.qk_norm);
  f("attention_bias", c.attention_bias);
  f("clip_qkv", c.clip_qkv);
  f("ffn_dim", c.ffn_dim);
  f("n_experts", c.n_experts);
  f("top_k", c.top_k);
  f("expert_dim", c.expert_dim);
  f("norm_topk_prob", c.norm_topk_prob);
  f("layer_is_moe", c.layer_is_moe);
  f("shared_expert_dim", c.shared_expert_dim);
  f("layer_mixer", c.layer_mixer);
  f("delta.n_k_heads", c.delta.n_k_heads);
  f("delta.n_v_heads", c.delta.n_v_heads);
  f("delta.k_head_dim", c.delta.k_head_dim);
  f("delta.v_head_dim", c.delta.v_head_dim);
  f("delta.conv_kernel", c.delta.conv_kernel);
  f("attn_output_gate", c.attn_output_gate);
  f("norm_offset", c.norm_offset);
  f("tie_embeddings", c.tie_embeddings);
  f("sliding_window", c.sliding_window);
  f("layer_sliding", c.layer_sliding);
  f("attn_sinks", c.attn_sinks);
  f("moe_bias", c.moe_bias);
  f("expert_act.kind", c.expert_act.kind);
  f("expert_act.alpha", c.expert_act.alpha);
  f("expert_act.limit", c.expert_act.limit);
  f("bos_token_id", c.bos_token_id);
  f("eos_token_ids", c.eos_token_ids);
}

template <class T>
void field_to_json(nlohmann::json& j, const char* k, const T& v) {
  if constexpr (std::is_enum_v<T>)
    j[k] = static_cast<int>(v);
  else if constexpr (std::is_same_v<T, std::vector<Mixer>>) {
    std::vector<int> m;
    for (Mixer x : v) m.push_back(static_cast<int>(x));
    j[k] = m;
  } else
    j[k] = v;
}

// Fields added after version 1 shipped: absent in older checkpoints, whose models had none of
// these features, so the ModelConfig default stands.
bool added_later(std::string_view k) {
  for (std::string_view a : {"sliding_window", "layer_sliding", "attn_sinks", "moe_bias",
                             "expert_act.kind", "expert_act.alpha", "expert_act.limit"})
    if (k == a) return true;
  return false;
}

template <class T>
void field_from_json(const nlohmann::json& j, const char* k, T& v, const std::string& where) {
  if (!j.contains(k) && added_later(k)) return;
  if (!j.contains(k)) fail("{}: config has no '{}'; write the checkpoint again", where, k);
  try {
    if constexpr (std::is_enum_v<T>)
      v = static_cast<T>(j[k].get<int>());
    else if constexpr (std::is_same_v<T, std::vector<Mixer>>) {
      v.clear();
      for (int x : j[k].get<std::vector<int>>()) v.push_back(static_cast<Mixer>(x));
    } else
      v = j[k].get<T>();
  } catch (const nlohmann::json::exception& e) {
    fail("{}: config field '{}' has the wrong type ({})", where, k, e.what());
  }
}

// ---- weights ----------------------------------------------------------------------------------
struct Entry {
  std::string name;
  bool matrix;
  TensorView view;  // matrices: the source view (converted on write when re-typed)
  const std::vector<float>* vec = nullptr;
  DType out_dtype = DType::F32;
  size_t offset = 0, bytes = 0, scale_offset = 0, scale_bytes = 0;
  float global_scale = 1.f;
  std::string alias;  // same data as an earlier entry (tied embeddings)
};

DType parse_matrix_type(const std::string& s) {
  std::string l;
  for (char ch : s) l += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (l == "f32") return DType::F32;
  if (l == "f16") return DType::F16;
  if (l == "bf16") return DType::BF16;
  if (l == "fp8") return DType::F8_E4M3_B128;
  return quant::to_dtype(quant::parse(s));
}

// The type a matrix becomes under target: the GGUF exporter's rules (routers f32, lm_head Q6_K
// under K-quants, whole-block fallbacks), FP8 / NVFP4 where the shape allows.
DType out_type(DType target, const std::string& name, const TensorView& v) {
  const int64_t cols = v.shape[1];
  if (name == "embed") return v.dtype;  // the lookup reads floats
  if (target == DType::F8_E4M3_B128)
    return name.find("router") != std::string::npos ? DType::F32 : target;
  if (target == DType::NVFP4)
    return name.find("router") != std::string::npos || cols % 16 ? DType::F32 : target;
  auto ggml = [](DType d) -> uint32_t {
    if (d == DType::F32) return k_ggml_f32;
    if (d == DType::F16) return k_ggml_f16;
    if (d == DType::BF16) return k_ggml_bf16;
    return static_cast<uint32_t>(quant::from_dtype(d));
  };
  const std::string gname = name == "lm_head" ? std::string(gguf_names::lm_head)
                            : name.find("router") != std::string::npos
                                ? std::string(gguf_names::router)
                                : name;
  const uint32_t t = gguf_export_type(ggml(target), gname, cols, false);
  if (t == k_ggml_f32) return DType::F32;
  if (t == k_ggml_f16) return DType::F16;
  if (t == k_ggml_bf16) return DType::BF16;
  return quant::to_dtype(static_cast<quant::QuantType>(t));
}

// Rows of src in dtype `to` at dst (+ FP8 scales at scale_dst); returns NVFP4's global scale.
float convert_matrix(const TensorView& src, DType to, char* dst, float* scale_dst,
                     ThreadPool& pool) {
  const int64_t rows = src.shape[0], cols = src.shape[1];
  if (src.dtype == to) {
    std::memcpy(dst, src.data, src.nbytes());
    if (to == DType::F8_E4M3_B128)
      std::memcpy(scale_dst, src.scale_inv, quant::fp8_b128_scale_count(rows, cols) * 4);
    return src.global_scale;
  }
  std::vector<float> all(static_cast<size_t>(rows * cols));
  pool.run(rows, 64, [&](int64_t r0, int64_t r1) {
    quant::dequantize_rows(src, r0, r1, all.data() + r0 * cols);
  });
  if (to == DType::F8_E4M3_B128) {
    quant::quantize_fp8_b128(all.data(), rows, cols, reinterpret_cast<uint8_t*>(dst), scale_dst);
    return 1.f;
  }
  float global = 1.f;
  if (to == DType::NVFP4) {
    float amax = 0;
    for (float x : all) amax = std::max(amax, std::fabs(x));
    global = quant::nvfp4_global_scale(amax);
  }
  const size_t rb = dtype_row_bytes(to, cols);
  pool.run(rows, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* x = all.data() + r * cols;
      char* o = dst + r * rb;
      if (to == DType::F32) {
        std::memcpy(o, x, cols * 4);
      } else if (to == DType::F16 || to == DType::BF16) {
        auto* h = reinterpret_cast<uint16_t*>(o);
        for (int64_t c = 0; c < cols; ++c)
          h[c] = to == DType::F16 ? f32_to_f16(x[c]) : f32_to_bf16(x[c]);
      } else {
        quant::quantize_row(quant::from_dtype(to), x, o, cols, global);
      }
    }
  });
  return global;
}

void copy_side_files(const std::string& src, const std::string& out) {
  // A GGUF source's tokenizer is the caller's to write (tokenizer/gguf_hf_files.h: the model
  // layer does not depend on the tokenizer); its config is in the index.
  if (is_gguf_path(src)) return;
  for (const char* f : {"config.json", "generation_config.json", "tokenizer.json",
                        "tokenizer_config.json", "chat_template.jinja", "README.md"}) {
    const fs::path p = fs::path(src) / f;
    if (fs::exists(p) && !fs::equivalent(p.parent_path(), out))
      fs::copy_file(p, fs::path(out) / f, fs::copy_options::overwrite_existing);
  }
}
}  // namespace

bool is_ft_checkpoint(const std::string& dir) { return file_exists(dir + "/" + k_ftc_index); }

nlohmann::json config_to_json(const ModelConfig& c) {
  nlohmann::json j = nlohmann::json::object();
  visit_config(c, [&](const char* k, const auto& v) { field_to_json(j, k, v); });
  return j;
}

ModelConfig config_from_json(const nlohmann::json& j, const std::string& where) {
  ModelConfig c;
  visit_config(c, [&](const char* k, auto& v) { field_from_json(j, k, v, where); });
  return c;
}

void write_ft_checkpoint(const Model& m, const std::string& src, const std::string& out_dir,
                         const FtcWriteOptions& o) {
  fs::create_directories(out_dir);
  const std::optional<DType> target =
      o.type.empty() ? std::nullopt : std::optional<DType>(parse_matrix_type(o.type));
  // Layout: every entry (and FP8 scale plane) at a 4 KiB-aligned offset.
  std::vector<Entry> entries;
  std::map<const void*, std::string> seen;
  size_t off = 0;
  visit_weights(m.weights(), [&](const std::string& name, const auto& v) {
    Entry e{.name = name, .matrix = false, .view = {}};
    if constexpr (std::is_same_v<std::decay_t<decltype(v)>, TensorView>) {
      if (v.empty()) return;
      e.matrix = true;
      e.view = v;
      e.out_dtype = target ? out_type(*target, name, v) : v.dtype;
      auto it = seen.find(v.data);
      if (it != seen.end() && e.out_dtype == v.dtype) {
        e.alias = it->second;
        entries.push_back(e);
        return;
      }
      seen.emplace(v.data, name);
      e.bytes = static_cast<size_t>(v.shape[0]) * dtype_row_bytes(e.out_dtype, v.shape[1]);
      e.offset = off;
      off = align_up(off + e.bytes);
      if (e.out_dtype == DType::F8_E4M3_B128) {
        e.scale_bytes = quant::fp8_b128_scale_count(v.shape[0], v.shape[1]) * 4;
        e.scale_offset = off;
        off = align_up(off + e.scale_bytes);
      }
    } else {
      if (v.empty()) return;
      e.vec = &v;
      e.bytes = v.size() * 4;
      e.offset = off;
      off = align_up(off + e.bytes);
    }
    entries.push_back(std::move(e));
  });
  const size_t total = std::max(off, k_align);

  // Data: converted into one aligned staging buffer per entry, written in order.
  const std::string data_path = out_dir + "/" + k_ftc_data;
  std::ofstream f(data_path, std::ios::binary | std::ios::trunc);
  if (!f) fail("cannot write {}: {}", data_path, std::strerror(errno));
  ThreadPool pool(0);
  std::vector<char> buf;
  size_t written = 0;
  auto pad_to = [&](size_t at) {
    static const std::vector<char> zeros(k_align, 0);
    while (written < at) {
      const size_t n = std::min(at - written, zeros.size());
      f.write(zeros.data(), static_cast<std::streamsize>(n));
      written += n;
    }
  };
  for (Entry& e : entries) {
    if (!e.alias.empty()) continue;
    pad_to(e.offset);
    if (!e.matrix) {
      f.write(reinterpret_cast<const char*>(e.vec->data()), static_cast<std::streamsize>(e.bytes));
      written += e.bytes;
    } else {
      buf.resize(e.bytes + e.scale_bytes);
      e.global_scale = convert_matrix(e.view, e.out_dtype, buf.data(),
                                      reinterpret_cast<float*>(buf.data() + e.bytes), pool);
      f.write(buf.data(), static_cast<std::streamsize>(e.bytes));
      written += e.bytes;
      if (e.scale_bytes) {
        pad_to(e.scale_offset);
        f.write(buf.data() + e.bytes, static_cast<std::streamsize>(e.scale_bytes));
        written += e.scale_bytes;
      }
    }
    if (o.progress) o.progress(written, total);
  }
  pad_to(total);
  f.close();
  if (!f) fail("cannot write {}: {}", data_path, std::strerror(errno));
  if (o.progress) o.progress(total, total);

  nlohmann::ordered_json idx;
  idx["format"] = "ft-checkpoint";
  idx["version"] = k_version;
  idx["alignment"] = k_align;
  idx["data"] = k_ftc_data;
  idx["data_bytes"] = total;
  idx["source"] = src;
  idx["config"] = config_to_json(m.config());
  nlohmann::ordered_json tensors = nlohmann::ordered_json::array();
  for (const Entry& e : entries) {
    nlohmann::ordered_json t = {{"name", e.name}};
    if (!e.alias.empty()) {
      t["alias"] = e.alias;
    } else if (e.matrix) {
      t["dtype"] = dtype_name(e.out_dtype);
      t["shape"] = {e.view.shape[0], e.view.shape[1]};
      t["offset"] = e.offset;
      t["bytes"] = e.bytes;
      if (e.scale_bytes) t["scale_inv_offset"] = e.scale_offset;
      if (e.out_dtype == DType::NVFP4) t["global_scale"] = e.global_scale;
    } else {
      t["dtype"] = "F32";
      t["shape"] = {static_cast<int64_t>(e.vec->size())};
      t["offset"] = e.offset;
      t["bytes"] = e.bytes;
    }
    tensors.push_back(t);
  }
  idx["tensors"] = tensors;
  copy_side_files(src, out_dir);
  // The index last: a directory is a checkpoint only once everything is in place.
  std::ofstream(out_dir + "/" + k_ftc_index) << idx.dump(1);
}

namespace {
struct FtcStorage {
  std::unique_ptr<HostBuffer> data;
};

bool dtype_by_name(const std::string& s, DType* out) {
  for (int i = 0; i <= static_cast<int>(DType::F8_E4M3_B128); ++i)
    if (dtype_name(static_cast<DType>(i)) == s) {
      *out = static_cast<DType>(i);
      return true;
    }
  return false;
}
}  // namespace

std::unique_ptr<Model> Model::load_ftc(const std::string& dir,
                                       const std::function<void(size_t, size_t)>& progress) {
  const std::string where = dir + "/" + k_ftc_index;
  nlohmann::json idx;
  try {
    idx = nlohmann::json::parse(read_file(where));
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not valid JSON ({}); write the checkpoint again with ft checkpoint", where, e.what());
  }
  if (idx.value("format", "") != "ft-checkpoint" || idx.value("version", 0) != k_version)
    fail("{}: not an ft checkpoint of version {}; write it again with this ft", where, k_version);
  std::unique_ptr<Model> m(new Model());
  m->dir_ = dir;
  m->config_ = config_from_json(idx["config"], where);
  validate_config(m->config_, where);
  const ModelConfig& c = m->config_;

  const std::string data_path = dir + "/" + idx.value("data", std::string(k_ftc_data));
  const size_t bytes = idx.value("data_bytes", size_t{0});
  if (!file_exists(data_path) || fs::file_size(data_path) < bytes)
    fail("{}: missing or shorter than the {} bytes its index names; copy the whole checkpoint",
         data_path, bytes);
  auto store = std::make_shared<FtcStorage>();
  store->data = std::make_unique<HostBuffer>(bytes);
  const DirectReadStats st =
      read_file_direct(data_path, store->data->data(), bytes, [&](size_t done) {
        if (progress) progress(done, bytes);
      });
  FT_LOG_INFO("{}: read {:.2f} GiB in {:.2f} s ({:.2f} GB/s, {})", data_path,
              static_cast<double>(bytes) / (1 << 30), st.seconds, st.gb_per_s(),
              st.direct ? "O_DIRECT" : "buffered");

  std::map<std::string, const nlohmann::json*> by_name;
  for (const auto& t : idx["tensors"]) by_name[t.value("name", "")] = &t;
  ModelWeights& w = m->weights_;
  w.layers.resize(c.n_layers);
  for (int64_t l = 0; l < c.n_layers; ++l)
    if (c.layer_is_moe[l]) w.layers[l].experts.resize(c.n_experts);
  const char* base = store->data->data();
  std::map<std::string, TensorView> views;
  auto locate = [&](const nlohmann::json& t, size_t* off) {
    *off = t.at("offset").get<size_t>();
    const size_t n = t.at("bytes").get<size_t>();
    if (*off + n > bytes) fail("{}: tensor '{}' lies past the data", where, t.value("name", ""));
    return n;
  };
  try {
    visit_weights(w, [&](const std::string& name, auto& v) {
      auto it = by_name.find(name);
      if (it == by_name.end()) return;  // absent in this family / layer
      const nlohmann::json& t = *it->second;
      if constexpr (std::is_same_v<std::decay_t<decltype(v)>, TensorView>) {
        if (t.contains("alias")) {
          v = views.at(t["alias"].get<std::string>());
          return;
        }
        DType dt;
        if (!dtype_by_name(t.at("dtype").get<std::string>(), &dt))
          fail("{}: tensor '{}' has unknown dtype {}", where, name, t["dtype"].dump());
        size_t off;
        const size_t n = locate(t, &off);
        v.dtype = dt;
        v.ndim = 2;
        v.shape = {t.at("shape")[0].get<int64_t>(), t.at("shape")[1].get<int64_t>(), 1, 1};
        v.data = base + off;
        v.name = name;
        if (v.nbytes() != n) fail("{}: tensor '{}' size does not match its shape", where, name);
        if (t.contains("scale_inv_offset"))
          v.scale_inv = reinterpret_cast<const float*>(base + t["scale_inv_offset"].get<size_t>());
        else if (dt == DType::F8_E4M3_B128)
          fail("{}: FP8 tensor '{}' has no scale_inv_offset", where, name);
        v.global_scale = t.value("global_scale", 1.f);
        views[name] = v;
      } else {
        size_t off;
        const size_t n = locate(t, &off);
        v.assign(reinterpret_cast<const float*>(base + off),
                 reinterpret_cast<const float*>(base + off + n));
      }
    });
  } catch (const nlohmann::json::exception& e) {
    fail("{}: malformed tensor entry ({}); write the checkpoint again", where, e.what());
  } catch (const std::out_of_range&) {
    fail("{}: an alias names a tensor that is not in the index", where);
  }
  if (w.embed.empty()) fail("{}: no embedding table; write the checkpoint again", where);
  m->storage_ = store;
  return m;
}

}  // namespace ft
