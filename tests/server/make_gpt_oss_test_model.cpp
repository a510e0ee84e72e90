// ft_make_gpt_oss_test_model OUT FIXTURE_DIR TOKENIZER_DIR TEMPLATE: the tiny gpt_oss fixture's
// layers with embeddings and lm_head widened to the real gpt-oss (o200k_harmony) vocabulary, its
// tokenizer files, a Harmony chat template and gpt-oss's stop ids (<|return|>, <|endoftext|>,
// <|call|>), so the server's Harmony path runs on real special-token ids. Random weights.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "base/error.h"
#include "base/half.h"
#include "io/mmap.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"
#include "tokenizer/tokenizer.h"

namespace fs = std::filesystem;
using namespace ft;

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr,
                 "usage: ft_make_gpt_oss_test_model OUT FIXTURE_DIR TOKENIZER_DIR TEMPLATE\n");
    return 2;
  }
  try {
    const fs::path out = argv[1], fixture = argv[2], tok_dir = argv[3], tpl = argv[4];
    fs::create_directories(out);
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
      fs::copy_file(tok_dir / f, out / f, fs::copy_options::overwrite_existing);
    fs::copy_file(tpl, out / "chat_template.jinja", fs::copy_options::overwrite_existing);
    const Tokenizer tok = Tokenizer::load(tok_dir.string());
    const int64_t vocab = (static_cast<int64_t>(tok.vocab_size()) + 63) / 64 * 64;
    auto id = [&](const char* t) {
      const int32_t i = tok.token_id(t);
      if (i < 0) fail("{}: no {} token", tok_dir.string(), t);
      return i;
    };
    nlohmann::json cfg = nlohmann::json::parse(read_file((fixture / "config.json").string()));
    cfg["vocab_size"] = vocab;
    cfg["eos_token_id"] = id("<|return|>");
    cfg["pad_token_id"] = id("<|endoftext|>");
    cfg["bos_token_id"] = id("<|startoftext|>");
    std::ofstream(out / "config.json") << cfg.dump(2);
    std::ofstream(out / "generation_config.json") << nlohmann::json{
        {"bos_token_id", id("<|startoftext|>")},
        {"eos_token_id", {id("<|return|>"), id("<|endoftext|>"), id("<|call|>")}},
        {"pad_token_id", id("<|endoftext|>")}}.dump(2);

    const SafetensorsSet weights = SafetensorsSet::open_dir(fixture.string());
    std::mt19937 rng(11);
    std::normal_distribution<float> normal;
    std::vector<std::vector<uint16_t>> store;
    std::vector<TensorView> tensors;
    for (const std::string& name : weights.names()) {
      TensorView t = weights.get(name);
      if (name == "model.embed_tokens.weight" || name == "lm_head.weight") {
        FT_CHECK(t.dtype == DType::BF16 && t.ndim == 2, "fixture {} is not 2-D bf16", name);
        t.shape[0] = vocab;
        std::vector<uint16_t> v(t.numel());
        const float scale = name == "lm_head.weight" ? 0.125f : 1.f;
        for (auto& x : v) x = f32_to_bf16(scale * normal(rng));
        t.data = v.data();
        store.push_back(std::move(v));
      }
      tensors.push_back(t);
    }
    write_safetensors((out / "model.safetensors").string(), tensors);
    std::printf("wrote %s (vocab %lld)\n", out.c_str(), static_cast<long long>(vocab));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ft_make_gpt_oss_test_model: %s\n", e.what());
    return 1;
  }
  return 0;
}
