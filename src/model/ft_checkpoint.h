// The fast-load checkpoint: a directory holding ft_checkpoint.json (format version, the
// ModelConfig, one index entry per weight), weights.ftw (every weight in the engine's canonical
// in-memory layout — quantized matrices already repacked, norms with their offsets baked in —
// each 4 KiB aligned) and the source's tokenizer/config files. Loading is one large O_DIRECT read
// of weights.ftw into a page-aligned buffer plus views into it; no per-tensor work.
#pragma once
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "model/model.h"

namespace ft {

inline constexpr const char* k_ftc_index = "ft_checkpoint.json";
inline constexpr const char* k_ftc_data = "weights.ftw";

// True when dir holds a fast-load checkpoint (its ft_checkpoint.json).
bool is_ft_checkpoint(const std::string& dir);

struct FtcWriteOptions {
  // Matrix type: a QuantType name ("q4_k", "fp8_e4m3_b128", "nvfp4", ..., "f16", "bf16", "f32")
  // or empty to keep each matrix as loaded. Routers stay f32, the embedding table keeps its float
  // type (the lookup reads floats), rows that are not whole blocks fall back as in ft quantize.
  std::string type;
  std::function<void(size_t done, size_t total)> progress;  // bytes of weights.ftw written
};

// Writes model m (loaded from src: an HF directory, a .gguf or another fast-load checkpoint) to
// out_dir, copying an HF src's tokenizer and config files (a GGUF's tokenizer: call
// write_gguf_tokenizer_as_hf, tokenizer/gguf_hf_files.h). ft::Error on I/O failure.
void write_ft_checkpoint(const Model& m, const std::string& src, const std::string& out_dir,
                         const FtcWriteOptions& o = {});

// ModelConfig <-> JSON, every field (the checkpoint stores the resolved config, so a GGUF
// source needs no config.json).
nlohmann::json config_to_json(const ModelConfig& c);
ModelConfig config_from_json(const nlohmann::json& j, const std::string& where);

}  // namespace ft
