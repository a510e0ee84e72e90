// Added tokens ("added_tokens"): a byte trie found leftmost-longest in the input before
// normalization (normalized=false) or after it (normalized=true), honouring single_word,
// lstrip and rstrip as HF's AddedVocabulary does.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ft {

struct AddedToken {
  int32_t id;
  std::string content;
  bool single_word = false, lstrip = false, rstrip = false, normalized = false, special = false;
};

// One piece of a split input: an added token (id >= 0) or the text [b, e) between them.
struct AddedSplit {
  int32_t id;
  size_t b, e;
};

class AddedTrie {
 public:
  void add(std::string_view key, int32_t token_index);
  bool empty() const { return nodes_.size() <= 1; }
  // Leftmost-longest match starting at or after `from`; false if none.
  bool find(std::string_view text, size_t from, size_t* b, size_t* e, int32_t* index) const;

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int32_t>> next;
    int32_t index = -1;
  };
  std::vector<Node> nodes_{1};
  bool first_byte_[256] = {};
};

class AddedVocab {
 public:
  // normalized_contents[i] is tokens[i].content after the tokenizer's normalizer.
  void build(std::vector<AddedToken> tokens, const std::vector<std::string>& normalized_contents);

  // Splits text on the raw (normalized=false) or the normalized tokens.
  std::vector<AddedSplit> split(std::string_view text, bool normalized) const;
  bool has_normalized() const { return !normalized_trie_.empty(); }

  const AddedToken* by_id(int32_t id) const;
  int32_t id_of(std::string_view content) const;
  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  std::vector<AddedToken> tokens_;
  std::unordered_map<int32_t, size_t> by_id_;
  AddedTrie raw_trie_, normalized_trie_;
};

}  // namespace ft
