// Decoders from tokenizer.json ("decoder"): ByteLevel, Metaspace, Replace, ByteFallback, Fuse,
// Strip and Sequence. decode() follows HF's decode_chain over the whole token list; piece()
// gives one token's contribution for streaming (see detokenizer.h).
#pragma once
#include <nlohmann/json_fwd.hpp>
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/regex.h"

namespace ft {

class Decoder {
 public:
  static Decoder from_json(const nlohmann::json& j, const std::string& where);

  // Tokens (vocab strings) -> text, always valid UTF-8.
  std::string decode(std::vector<std::string> tokens) const;

  // One token's bytes for streaming. byte_token: it came from a <0xXX> byte-fallback token.
  // The bytes may be an incomplete or invalid UTF-8 fragment; the caller repairs (repair()).
  struct Piece {
    std::string bytes;
    bool byte_token = false;
  };
  Piece piece(const std::string& token, bool first) const;

  // How invalid bytes become U+FFFD: LOSSY = one per maximal invalid subpart of the whole byte
  // stream (ByteLevel); PER_BYTE = one per byte of a bad run of byte tokens (ByteFallback).
  enum class Repair { LOSSY, PER_BYTE };
  Repair repair() const { return repair_; }

 private:
  enum class Kind { BYTE_LEVEL, METASPACE, REPLACE, BYTE_FALLBACK, FUSE, STRIP };
  struct Step {
    Kind kind;
    std::shared_ptr<Regex> pattern{};  // REPLACE
    std::string content{};             // REPLACE content; STRIP char; METASPACE replacement
    size_t start = 0, stop = 0;      // STRIP
    bool prepend = true;             // METASPACE: strip the first token's leading space
  };
  void add(const nlohmann::json& j, const std::string& where);

  std::vector<Step> steps_;
  bool none_ = true;  // no decoder: tokens are joined with spaces
  Repair repair_ = Repair::LOSSY;
};

}  // namespace ft
