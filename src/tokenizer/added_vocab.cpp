// Added-token trie and the split of input text around added tokens.
#include "tokenizer/added_vocab.h"

#include "tokenizer/unicode.h"

namespace ft {

void AddedTrie::add(std::string_view key, int32_t token_index) {
  if (key.empty()) return;
  int32_t node = 0;
  for (unsigned char c : key) {
    int32_t child = -1;
    for (auto& [byte, to] : nodes_[node].next) {
      if (byte == c) child = to;
    }
    if (child < 0) {
      child = int32_t(nodes_.size());
      nodes_[node].next.emplace_back(c, child);
      nodes_.emplace_back();
    }
    node = child;
  }
  if (nodes_[node].index < 0) nodes_[node].index = token_index;  // first definition wins
  first_byte_[static_cast<unsigned char>(key[0])] = true;
}

bool AddedTrie::find(std::string_view text, size_t from, size_t* b, size_t* e,
                     int32_t* index) const {
  for (size_t pos = from; pos < text.size(); ++pos) {
    if (!first_byte_[static_cast<unsigned char>(text[pos])]) continue;
    int32_t node = 0, best = -1;
    size_t best_end = 0;
    for (size_t i = pos; i < text.size(); ++i) {
      auto c = static_cast<unsigned char>(text[i]);
      int32_t child = -1;
      for (auto& [byte, to] : nodes_[node].next) {
        if (byte == c) {
          child = to;
          break;
        }
      }
      if (child < 0) break;
      node = child;
      if (nodes_[node].index >= 0) {
        best = nodes_[node].index;
        best_end = i + 1;
      }
    }
    if (best >= 0) {
      *b = pos;
      *e = best_end;
      *index = best;
      return true;
    }
  }
  return false;
}

void AddedVocab::build(std::vector<AddedToken> tokens,
                       const std::vector<std::string>& normalized_contents) {
  tokens_ = std::move(tokens);
  for (size_t i = 0; i < tokens_.size(); ++i) {
    by_id_.emplace(tokens_[i].id, i);
    if (tokens_[i].normalized) {
      normalized_trie_.add(normalized_contents[i], int32_t(i));
    } else {
      raw_trie_.add(tokens_[i].content, int32_t(i));
    }
  }
}

const AddedToken* AddedVocab::by_id(int32_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

int32_t AddedVocab::id_of(std::string_view content) const {
  for (const auto& t : tokens_)
    if (t.content == content) return t.id;
  return -1;
}

namespace {

uint32_t last_char(std::string_view s) {
  size_t start = s.size() - 1;
  while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
  return utf8::next(s, start);
}

bool is_word(uint32_t cp) { return cp == '_' || utf8::is_alnum(cp); }

}  // namespace

std::vector<AddedSplit> AddedVocab::split(std::string_view text, bool normalized) const {
  const AddedTrie& trie = normalized ? normalized_trie_ : raw_trie_;
  std::vector<AddedSplit> out;
  size_t done = 0;  // end of the last emitted piece
  size_t from = 0, b, e;
  int32_t index;
  while (!trie.empty() && trie.find(text, from, &b, &e, &index)) {
    from = e;
    const AddedToken& t = tokens_[index];
    if (t.single_word) {
      bool left_ok = b == 0 || !is_word(last_char(text.substr(0, b)));
      size_t i = e;
      bool right_ok = e == text.size() || !is_word(utf8::next(text, i));
      if (!left_ok || !right_ok) continue;
    }
    if (t.lstrip) {
      while (b > done) {
        size_t start = b - 1;
        while (start > done && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
        size_t i = start;
        if (!utf8::is_space(utf8::next(text, i))) break;
        b = start;
      }
    }
    if (t.rstrip) {
      while (e < text.size()) {
        size_t i = e;
        if (!utf8::is_space(utf8::next(text, i))) break;
        e = i;
      }
      from = e;
    }
    if (b > done) out.push_back({-1, done, b});
    out.push_back({t.id, b, e});
    done = e;
  }
  if (done < text.size()) out.push_back({-1, done, text.size()});
  return out;
}

}  // namespace ft
