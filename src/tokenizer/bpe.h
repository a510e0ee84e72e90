// BPE model ("model": {"type": "BPE"}): vocab, merge ranks over id pairs, the merge loop
// (linked symbols + min-heap), byte-level or byte-fallback initial symbols, a bounded word cache.
#pragma once
#include <nlohmann/json_fwd.hpp>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ft {

// Open-addressing map from a token-id pair to (merge rank, merged id).
class MergeMap {
 public:
  struct Value {
    uint32_t rank;
    int32_t id;
  };
  void reserve(size_t n);
  void insert(int32_t a, int32_t b, Value v);  // a later insert of the same pair wins
  const Value* find(int32_t a, int32_t b) const {
    uint64_t key = pack(a, b);
    for (size_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.key == key) return &s.value;
      if (s.key == kEmpty) return nullptr;
    }
  }
  size_t size() const { return size_; }

 private:
  static constexpr uint64_t kEmpty = ~0ull;
  struct Slot {
    uint64_t key = kEmpty;
    Value value{};
  };
  static uint64_t pack(int32_t a, int32_t b) {
    return (uint64_t(uint32_t(a)) << 32) | uint32_t(b);
  }
  static size_t hash(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return static_cast<size_t>(k);
  }
  std::vector<Slot> slots_;
  size_t mask_ = 0, size_ = 0;
};

// Hash for string-keyed maps that can be probed with a string_view (no temporary string).
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
template <typename V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

class Bpe {
 public:
  // Reads vocab, merges (either "a b" strings or ["a","b"] pairs) and options from the model
  // node. byte_level: words arrive as raw bytes and are mapped through the GPT-2 alphabet.
  static Bpe from_json(const nlohmann::json& model, bool byte_level, const std::string& where);

  // Appends the ids of one pre-tokenized word.
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;

  int32_t token_id(std::string_view token) const;  // -1 if absent
  const std::vector<std::string>& vocab() const { return id_to_token_; }
  size_t vocab_size() const { return id_to_token_.size(); }

  Bpe() = default;
  Bpe(Bpe&& o) noexcept;
  Bpe& operator=(Bpe&& o) noexcept;

 private:
  struct Symbol {
    int32_t id;
    int32_t prev, next;
    uint32_t len;  // bytes of the word covered; 0 once merged away
  };
  void initial_symbols(std::string_view word, std::vector<Symbol>& syms) const;
  void merge(std::vector<Symbol>& syms) const;
  void merge_small(std::vector<Symbol>& syms) const;
  void merge_heap(std::vector<Symbol>& syms) const;
  int32_t char_id(uint32_t cp) const;

  StringMap<int32_t> token_to_id_;
  std::vector<std::string> id_to_token_;  // [vocab_size]; "" for holes
  MergeMap merges_;
  std::vector<int32_t> ascii_ids_;                 // [128] single-char ids (non-byte-level)
  std::unordered_map<uint32_t, int32_t> char_ids_;  // other single-char tokens (non-byte-level)
  int32_t byte_ids_[256];  // byte-level: id of each byte's char; else <0xXX> fallback ids (-1)
  bool byte_level_ = false, byte_fallback_ = false, fuse_unk_ = false, ignore_merges_ = false;
  int32_t unk_id_ = -1;

  // Word cache: pretokenized word -> ids. Bounded; cleared when full. Guarded by try_lock so
  // concurrent encoders never wait on each other.
  static constexpr size_t kCacheWords = 1 << 16;
  static constexpr size_t kCacheMaxWordBytes = 128;
  mutable std::mutex cache_mu_;
  mutable StringMap<std::vector<int32_t>> cache_;
};

}  // namespace ft
