// Incremental detokenizer over the decoder's per-token pieces with UTF-8 hold-back.
#include "tokenizer/detokenizer.h"

#include "tokenizer/unicode.h"

namespace ft {

namespace {
constexpr const char* kReplacement = "\xEF\xBF\xBD";
}  // namespace

void Detokenizer::drain(std::string& out, bool final) {
  size_t i = 0;
  bool per_byte = tok_.decoder().repair() == Decoder::Repair::PER_BYTE;
  while (i < pending_.size()) {
    int bad, n = utf8::scan(pending_, i, &bad);
    if (n > 0) {
      out.append(pending_, i, n);
      i += n;
      continue;
    }
    if (n < 0 && !final) break;  // unfinished character: wait for more bytes
    if (per_byte) {
      // HF's ByteFallback turns every byte of a bad run into U+FFFD.
      for (size_t k = i; k < pending_.size(); ++k) out += kReplacement;
      i = pending_.size();
      break;
    }
    // Lossy: one U+FFFD per maximal invalid subpart (an unfinished tail is one subpart).
    out += kReplacement;
    if (n < 0) {
      i = pending_.size();
    } else {
      i += bad;
    }
  }
  pending_.erase(0, i);
}

std::string Detokenizer::feed(int32_t id) {
  if (skip_special_ && tok_.is_special(id)) return {};
  std::string_view token = tok_.piece(id);
  if (token.empty()) return {};
  Decoder::Piece p = tok_.decoder().piece(std::string(token), first_);
  first_ = false;
  std::string out;
  if (tok_.decoder().repair() == Decoder::Repair::PER_BYTE && !p.byte_token && !pending_.empty())
    drain(out, true);  // a byte run ended unfinished
  pending_ += p.bytes;
  drain(out, false);
  return out;
}

std::string Detokenizer::flush() {
  std::string out;
  drain(out, true);
  pending_.clear();
  first_ = true;
  return out;
}

}  // namespace ft
