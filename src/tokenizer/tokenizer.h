// Hugging Face tokenizer: loads tokenizer.json (+ tokenizer_config.json) and encodes/decodes
// exactly as HF does: added tokens -> normalizer -> pre-tokenizer -> BPE -> post-processor.
// Immutable after load and safe to share between threads.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/added_vocab.h"
#include "tokenizer/bpe.h"
#include "tokenizer/decoder.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"

namespace ft {

class Tokenizer {
 public:
  // dir holds tokenizer.json and optionally tokenizer_config.json. Throws ft::Error.
  static Tokenizer load(const std::string& dir);
  // A tokenizer from a tokenizer.json document (`where` names it in errors).
  static Tokenizer from_json(const nlohmann::json& j, const std::string& where);
  // From a GGUF file's tokenizer.ggml.* metadata (tokenizer/gguf_vocab.cpp); load() calls it
  // for paths ending in .gguf.
  static Tokenizer load_gguf(const std::string& path);

  // add_special: add BOS/EOS as the post-processor (or tokenizer_config's add_bos_token /
  // add_eos_token, which transformers applies on top of tokenizer.json) says. Added tokens in
  // the text (e.g. "<|im_start|>") are always recognised, as in HF. Invalid UTF-8 is repaired.
  std::vector<int32_t> encode(std::string_view text, bool add_special) const;
  void encode_into(std::string_view text, bool add_special, std::vector<int32_t>& out) const;

  // ids -> text (valid UTF-8). skip_special drops added tokens marked special. Unknown ids are
  // dropped, as in HF.
  std::string decode(std::span<const int32_t> ids, bool skip_special) const;

  std::string_view piece(int32_t id) const;  // the token's string ("" for unknown ids)
  int32_t token_id(std::string_view token) const;  // added or vocab token; -1 if absent
  size_t vocab_size() const { return vocab_size_; }
  int32_t bos_id() const { return bos_id_; }  // -1 when the tokenizer has none
  int32_t eos_id() const { return eos_id_; }
  bool is_special(int32_t id) const;
  const Decoder& decoder() const { return decoder_; }
  const std::vector<int32_t>& prefix_ids() const { return prefix_; }  // added by add_special
  const std::vector<int32_t>& suffix_ids() const { return suffix_; }

 private:
  void load_post_processor(const nlohmann::json& j, const std::string& where);
  void load_config(const std::string& path);
  void encode_text(std::string_view text, bool first, std::vector<int32_t>& out) const;

  AddedVocab added_;
  Normalizer normalizer_;
  PreTokenizer pre_tokenizer_;
  Bpe bpe_;
  Decoder decoder_;
  std::vector<int32_t> prefix_, suffix_;
  int32_t bos_id_ = -1, eos_id_ = -1;
  size_t vocab_size_ = 0;
};

}  // namespace ft
