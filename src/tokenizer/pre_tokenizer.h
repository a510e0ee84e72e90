// Pre-tokenizers from tokenizer.json ("pre_tokenizer"): Sequence, Split, ByteLevel, Digits,
// Metaspace, Whitespace, WhitespaceSplit, Punctuation. They cut normalized text into words.
#pragma once
#include <nlohmann/json_fwd.hpp>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/regex.h"

namespace ft {

class PreTokenizer {
 public:
  // Builds from the JSON node (null = the whole text is one word). Throws ft::Error.
  static PreTokenizer from_json(const nlohmann::json& j, const std::string& where);

  // Calls emit(word) for each word of text, in order. Words are views valid only during the
  // call. `first` says the text starts the original input (Metaspace prepend_scheme "first").
  using Emit = std::function<void(std::string_view)>;
  void run(std::string_view text, bool first, const Emit& emit) const;

  // True when a ByteLevel step is present: words must be mapped through the byte alphabet.
  bool byte_level() const { return byte_level_; }

 private:
  enum class Kind { SPLIT, BYTE_LEVEL, METASPACE };
  enum class Behavior { REMOVED, ISOLATED, MERGED_WITH_PREVIOUS, MERGED_WITH_NEXT, CONTIGUOUS };
  struct Step {
    Kind kind;
    std::shared_ptr<Regex> pattern{};  // SPLIT (and ByteLevel with use_regex)
    Behavior behavior = Behavior::ISOLATED;
    bool invert = false;
    bool add_prefix_space = false;   // BYTE_LEVEL
    std::string replacement{};         // METASPACE
    std::string prepend_scheme{};      // METASPACE: always | first | never
    bool split = true;               // METASPACE
  };
  void add(const nlohmann::json& j, const std::string& where);
  void run_step(size_t k, std::string_view text, bool first, const Emit& emit) const;
  void split(const Step& st, size_t k, std::string_view text, bool first, const Emit& emit) const;

  std::vector<Step> steps_;
  bool byte_level_ = false;
};

}  // namespace ft
