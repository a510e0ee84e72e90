// ft_make_test_model OUT_DIR TOKENIZER_DIR: a tiny random-weight qwen3_moe checkpoint sized to a
// real tokenizer's vocabulary (tokenizer files copied beside it), for server and SDK tests.
// Random weights produce arbitrary text; protocol tests need a real vocabulary, not sense.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/half.h"
#include "io/mmap.h"
#include "io/safetensors_writer.h"
#include "tokenizer/tokenizer.h"

namespace fs = std::filesystem;
using namespace ft;

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: ft_make_test_model OUT_DIR TOKENIZER_DIR\n");
    return 2;
  }
  try {
    const fs::path out = argv[1], tok_dir = argv[2];
    fs::create_directories(out);
    for (const char* f : {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"})
      if (fs::exists(tok_dir / f)) fs::copy_file(tok_dir / f, out / f, fs::copy_options::overwrite_existing);
    Tokenizer tok = Tokenizer::load(tok_dir.string());
    const int64_t vocab = (static_cast<int64_t>(tok.vocab_size()) + 63) / 64 * 64;
    const int64_t H = 64, L = 2, heads = 4, kv = 2, hd = 16, E = 4, I = 32;
    std::vector<int64_t> eos;
    for (const char* t : {"<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<end_of_turn>"})
      if (tok.token_id(t) >= 0) eos.push_back(tok.token_id(t));
    nlohmann::json cfg = {
        {"model_type", "qwen3_moe"}, {"architectures", {"Qwen3MoeForCausalLM"}},
        {"vocab_size", vocab}, {"hidden_size", H}, {"num_hidden_layers", L},
        {"num_attention_heads", heads}, {"num_key_value_heads", kv}, {"head_dim", hd},
        {"intermediate_size", 96}, {"moe_intermediate_size", I}, {"num_experts", E},
        {"num_experts_per_tok", 2}, {"norm_topk_prob", true}, {"decoder_sparse_step", 1},
        {"mlp_only_layers", nlohmann::json::array()}, {"rms_norm_eps", 1e-6},
        {"rope_theta", 1000000.0}, {"max_position_embeddings", 32768},
        {"tie_word_embeddings", true}, {"eos_token_id", eos}};
    std::ofstream(out / "config.json") << cfg.dump(2);
    std::mt19937 rng(7);
    std::normal_distribution<float> normal;
    std::vector<std::vector<uint16_t>> store;
    std::vector<TensorView> tensors;
    auto add = [&](const std::string& name, std::vector<int64_t> shape, float scale, float mean = 0) {
      TensorView t;
      t.name = name;
      t.dtype = DType::BF16;
      t.ndim = static_cast<int>(shape.size());
      for (size_t i = 0; i < shape.size(); ++i) t.shape[i] = shape[i];
      std::vector<uint16_t> v(t.numel());
      for (auto& x : v) x = f32_to_bf16(mean + scale * normal(rng));
      t.data = v.data();
      store.push_back(std::move(v));
      tensors.push_back(t);
    };
    add("model.embed_tokens.weight", {vocab, H}, 1.f);
    add("model.norm.weight", {H}, 0.1f, 1.f);
    for (int64_t l = 0; l < L; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      add(p + "input_layernorm.weight", {H}, 0.1f, 1.f);
      add(p + "post_attention_layernorm.weight", {H}, 0.1f, 1.f);
      add(p + "self_attn.q_proj.weight", {heads * hd, H}, 0.125f);
      add(p + "self_attn.k_proj.weight", {kv * hd, H}, 0.125f);
      add(p + "self_attn.v_proj.weight", {kv * hd, H}, 0.125f);
      add(p + "self_attn.o_proj.weight", {H, heads * hd}, 0.125f);
      add(p + "self_attn.q_norm.weight", {hd}, 0.1f, 1.f);
      add(p + "self_attn.k_norm.weight", {hd}, 0.1f, 1.f);
      add(p + "mlp.gate.weight", {E, H}, 0.125f);
      for (int64_t e = 0; e < E; ++e) {
        const std::string q = p + "mlp.experts." + std::to_string(e) + ".";
        add(q + "gate_proj.weight", {I, H}, 0.125f);
        add(q + "up_proj.weight", {I, H}, 0.125f);
        add(q + "down_proj.weight", {H, I}, 0.18f);
      }
    }
    write_safetensors((out / "model.safetensors").string(), tensors);
    std::printf("wrote %s (vocab %lld)\n", out.c_str(), static_cast<long long>(vocab));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ft_make_test_model: %s\n", e.what());
    return 1;
  }
  return 0;
}
