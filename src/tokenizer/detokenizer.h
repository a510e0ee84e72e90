// Incremental detokenizer: feed generated ids one at a time and get text deltas that are always
// valid UTF-8. Bytes of a character split across tokens (byte-level pieces, <0xE2>-style
// byte-fallback tokens) are held back until the character is complete; flush() ends the stream.
// Concatenated deltas + flush() equal Tokenizer::decode() of the same ids for valid text.
// For invalid byte sequences, LOSSY decoders match decode() exactly; with ByteFallback the
// valid characters inside a bad byte run are kept (decode() would replace the whole run).
#pragma once
#include <cstdint>
#include <string>

#include "tokenizer/tokenizer.h"

namespace ft {

class Detokenizer {
 public:
  // tok must outlive the detokenizer. skip_special drops special added tokens, as in decode().
  Detokenizer(const Tokenizer& tok, bool skip_special) : tok_(tok), skip_special_(skip_special) {}

  std::string feed(int32_t id);  // the new text (possibly empty)
  std::string flush();           // held-back bytes, repaired to U+FFFD; resets the stream

 private:
  void drain(std::string& out, bool final);

  const Tokenizer& tok_;
  bool skip_special_;
  bool first_ = true;
  std::string pending_;  // bytes not yet emitted: an unfinished character or byte run
};

}  // namespace ft
