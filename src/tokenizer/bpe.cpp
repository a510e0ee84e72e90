// BPE model: loading vocab/merges and merging a word's symbols by rank.
#include "tokenizer/bpe.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <queue>

#include "base/error.h"
#include "tokenizer/unicode.h"

namespace ft {

void MergeMap::reserve(size_t n) {
  size_t cap = 16;
  while (cap < n * 2) cap <<= 1;
  slots_.assign(cap, Slot{});
  mask_ = cap - 1;
  size_ = 0;
}

void MergeMap::insert(int32_t a, int32_t b, Value v) {
  uint64_t key = pack(a, b);
  for (size_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
    Slot& s = slots_[i];
    if (s.key == key) {
      s.value = v;
      return;
    }
    if (s.key == kEmpty) {
      s.key = key;
      s.value = v;
      ++size_;
      return;
    }
  }
}

Bpe::Bpe(Bpe&& o) noexcept { *this = std::move(o); }

Bpe& Bpe::operator=(Bpe&& o) noexcept {
  token_to_id_ = std::move(o.token_to_id_);
  id_to_token_ = std::move(o.id_to_token_);
  merges_ = std::move(o.merges_);
  ascii_ids_ = std::move(o.ascii_ids_);
  char_ids_ = std::move(o.char_ids_);
  std::copy(std::begin(o.byte_ids_), std::end(o.byte_ids_), byte_ids_);
  byte_level_ = o.byte_level_;
  byte_fallback_ = o.byte_fallback_;
  fuse_unk_ = o.fuse_unk_;
  ignore_merges_ = o.ignore_merges_;
  unk_id_ = o.unk_id_;
  return *this;
}

Bpe Bpe::from_json(const nlohmann::json& m, bool byte_level, const std::string& where) {
  Bpe bpe;
  bpe.byte_level_ = byte_level;
  bpe.byte_fallback_ = m.value("byte_fallback", false);
  bpe.fuse_unk_ = m.value("fuse_unk", false);
  bpe.ignore_merges_ = m.value("ignore_merges", false);
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (m.contains(key) && m[key].is_string() && !m[key].get<std::string>().empty())
      fail("{}: BPE {} is not supported; only prefix-free BPE models load", where, key);
  }
  if (!m.value("dropout", nlohmann::json()).is_null() && m["dropout"].get<double>() > 0)
    fail("{}: BPE dropout is not supported at inference; set \"dropout\": null", where);

  const auto& vocab = m.at("vocab");
  if (!vocab.is_object()) fail("{}: model.vocab must be an object of token -> id", where);
  bpe.token_to_id_.reserve(vocab.size());
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    int32_t id = it.value().get<int32_t>();
    if (id < 0) fail("{}: negative id for token '{}'", where, it.key());
    if (size_t(id) >= bpe.id_to_token_.size()) bpe.id_to_token_.resize(id + 1);
    bpe.id_to_token_[id] = it.key();
    bpe.token_to_id_.emplace(it.key(), id);
  }

  const auto& merges = m.at("merges");
  bpe.merges_.reserve(merges.size());
  uint32_t rank = 0;
  for (const auto& mg : merges) {
    std::string a, b;
    if (mg.is_string()) {
      const auto& s = mg.get_ref<const std::string&>();
      size_t sp = s.find(' ', 1);
      if (sp == std::string::npos) fail("{}: merge '{}' is not of the form \"a b\"", where, s);
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (mg.is_array() && mg.size() == 2) {
      a = mg[0].get<std::string>();
      b = mg[1].get<std::string>();
    } else {
      fail("{}: merge {} must be \"a b\" or [\"a\", \"b\"]", where, mg.dump());
    }
    int32_t ia = bpe.token_id(a), ib = bpe.token_id(b), ic = bpe.token_id(a + b);
    if (ia < 0 || ib < 0 || ic < 0)
      fail("{}: merge '{} {}' uses a token missing from the vocab", where, a, b);
    bpe.merges_.insert(ia, ib, {rank++, ic});
  }

  if (m.contains("unk_token") && m["unk_token"].is_string()) {
    bpe.unk_id_ = bpe.token_id(m["unk_token"].get<std::string>());
  }
  std::fill(std::begin(bpe.byte_ids_), std::end(bpe.byte_ids_), -1);
  if (byte_level) {
    const auto& b2c = utf8::byte_to_char();
    for (int b = 0; b < 256; ++b) {
      std::string ch;
      utf8::append(ch, b2c[b]);
      bpe.byte_ids_[b] = bpe.token_id(ch);
    }
  } else {
    bpe.ascii_ids_.assign(128, -1);
    for (size_t id = 0; id < bpe.id_to_token_.size(); ++id) {
      const std::string& t = bpe.id_to_token_[id];
      if (t.empty() || size_t(utf8::seq_len(t[0])) != t.size()) continue;
      size_t i = 0;
      uint32_t cp = utf8::next(t, i);
      if (cp < 128) {
        bpe.ascii_ids_[cp] = int32_t(id);
      } else {
        bpe.char_ids_[cp] = int32_t(id);
      }
    }
    if (bpe.byte_fallback_) {
      for (int b = 0; b < 256; ++b) bpe.byte_ids_[b] = bpe.token_id(fmt::format("<0x{:02X}>", b));
    }
  }
  return bpe;
}

int32_t Bpe::token_id(std::string_view token) const {
  auto it = token_to_id_.find(token);
  return it == token_to_id_.end() ? -1 : it->second;
}

int32_t Bpe::char_id(uint32_t cp) const {
  if (cp < 128) return ascii_ids_[cp];
  auto it = char_ids_.find(cp);
  return it == char_ids_.end() ? -1 : it->second;
}

void Bpe::initial_symbols(std::string_view word, std::vector<Symbol>& syms) const {
  syms.clear();
  auto push = [&](int32_t id, uint32_t len) {
    int32_t n = int32_t(syms.size());
    syms.push_back({id, n - 1, n + 1, len});
  };
  if (byte_level_) {
    for (unsigned char c : word) {
      if (byte_ids_[c] >= 0) {
        push(byte_ids_[c], 1);
      } else if (unk_id_ >= 0) {
        if (fuse_unk_ && !syms.empty() && syms.back().id == unk_id_) {
          syms.back().len += 1;
        } else {
          push(unk_id_, 1);
        }
      }
    }
  } else {
    bool prev_unk = false;
    for (size_t i = 0; i < word.size();) {
      size_t start = i;
      uint32_t cp = utf8::next(word, i);
      uint32_t len = uint32_t(i - start);
      int32_t id = char_id(cp);
      if (id >= 0) {
        push(id, len);
        prev_unk = false;
        continue;
      }
      if (byte_fallback_) {
        bool all = true;
        for (size_t k = start; k < i; ++k) all &= byte_ids_[static_cast<unsigned char>(word[k])] >= 0;
        if (all) {
          for (size_t k = start; k < i; ++k) push(byte_ids_[static_cast<unsigned char>(word[k])], 1);
          prev_unk = false;
          continue;
        }
      }
      if (unk_id_ < 0) continue;  // HF drops characters it cannot represent
      if (fuse_unk_ && prev_unk) {
        syms.back().len += len;
      } else {
        push(unk_id_, len);
      }
      prev_unk = true;
    }
  }
  if (!syms.empty()) syms.back().next = -1;
}

// For short words a linear scan for the lowest-ranked adjacent pair beats a heap, and picks
// the same pair (lowest rank, then leftmost) that HF's heap would.
void Bpe::merge_small(std::vector<Symbol>& syms) const {
  for (;;) {
    uint32_t best_rank = UINT32_MAX;
    int32_t best_pos = -1, best_id = -1;
    for (int32_t i = 0; i != -1 && syms[i].next != -1; i = syms[i].next) {
      const auto* v = merges_.find(syms[i].id, syms[syms[i].next].id);
      if (v && v->rank < best_rank) {
        best_rank = v->rank;
        best_pos = i;
        best_id = v->id;
      }
    }
    if (best_pos < 0) return;
    Symbol& s = syms[best_pos];
    Symbol& r = syms[s.next];
    s.id = best_id;
    s.len += r.len;
    r.len = 0;
    s.next = r.next;
    if (s.next != -1) syms[s.next].prev = best_pos;
  }
}

void Bpe::merge_heap(std::vector<Symbol>& syms) const {
  struct Cand {
    uint32_t rank;
    int32_t pos, id;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  thread_local std::vector<Cand> storage;
  storage.clear();
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap(std::greater<Cand>(),
                                                                         std::move(storage));
  auto consider = [&](int32_t pos) {
    if (pos < 0 || syms[pos].next < 0) return;
    if (const auto* v = merges_.find(syms[pos].id, syms[syms[pos].next].id))
      heap.push({v->rank, pos, v->id});
  };
  for (int32_t i = 0; i + 1 < int32_t(syms.size()); ++i) consider(i);
  while (!heap.empty()) {
    Cand c = heap.top();
    heap.pop();
    Symbol& s = syms[c.pos];
    if (s.len == 0 || s.next < 0) continue;
    const auto* v = merges_.find(s.id, syms[s.next].id);
    if (!v || v->id != c.id) continue;  // stale: a neighbour changed since it was pushed
    Symbol& r = syms[s.next];
    s.id = c.id;
    s.len += r.len;
    r.len = 0;
    s.next = r.next;
    if (s.next != -1) syms[s.next].prev = c.pos;
    consider(s.prev);
    consider(c.pos);
  }
}

void Bpe::merge(std::vector<Symbol>& syms) const {
  if (syms.size() < 2) return;
  if (syms.size() <= 24) {
    merge_small(syms);
  } else {
    merge_heap(syms);
  }
}

void Bpe::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  bool cacheable = word.size() <= kCacheMaxWordBytes;
  if (cacheable) {
    std::unique_lock lock(cache_mu_, std::try_to_lock);
    if (lock.owns_lock()) {
      auto it = cache_.find(word);
      if (it != cache_.end()) {
        out.insert(out.end(), it->second.begin(), it->second.end());
        return;
      }
    }
  }
  size_t first = out.size();
  if (ignore_merges_) {
    std::string mapped;
    if (byte_level_) {
      for (unsigned char c : word) utf8::append(mapped, utf8::byte_to_char()[c]);
    }
    int32_t id = token_id(byte_level_ ? std::string_view(mapped) : word);
    if (id >= 0) out.push_back(id);
  }
  if (out.size() == first) {
    thread_local std::vector<Symbol> syms;
    initial_symbols(word, syms);
    merge(syms);
    for (int32_t i = syms.empty() ? -1 : 0; i != -1; i = syms[i].next) out.push_back(syms[i].id);
  }
  if (cacheable) {
    std::unique_lock lock(cache_mu_, std::try_to_lock);
    if (lock.owns_lock()) {
      if (cache_.size() >= kCacheWords) cache_.clear();
      cache_.emplace(std::string(word), std::vector<int32_t>(out.begin() + first, out.end()));
    }
  }
}

}  // namespace ft
