// Normalizers from tokenizer.json ("normalizer"): NFC/NFD/NFKC/NFKD, Lowercase, Replace,
// Prepend, Strip and Sequence, applied to text between added tokens.
#pragma once
#include <nlohmann/json_fwd.hpp>
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/regex.h"

namespace ft {

class Normalizer {
 public:
  // Builds from the JSON node (null = identity). Unsupported types throw ft::Error.
  static Normalizer from_json(const nlohmann::json& j, const std::string& where);
  std::string apply(std::string s) const;
  bool empty() const { return steps_.empty(); }

 private:
  enum class Kind { NFC, NFD, NFKC, NFKD, LOWERCASE, REPLACE, PREPEND, STRIP };
  struct Step {
    Kind kind;
    std::shared_ptr<Regex> pattern{};  // REPLACE
    std::string content{};             // REPLACE, PREPEND
    bool left = false, right = false;  // STRIP
  };
  static void add(std::vector<Step>& steps, const nlohmann::json& j, const std::string& where);
  std::vector<Step> steps_;
};

// Replaces every match of re in s by content.
std::string regex_replace(const Regex& re, std::string_view s, std::string_view content);

}  // namespace ft
