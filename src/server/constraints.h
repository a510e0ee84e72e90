// Logits processors for tool_choice enforcement: the output is forced to be one well-formed
// tool call in the model's format (opener with a tool name, JSON/XML arguments, closer, EOS).
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/request.h"
#include "server/parsers/json_prefix.h"
#include "server/parsers/parsers.h"
#include "tokenizer/tokenizer.h"

namespace ft::server {

// Every token's output bytes (what the detokenizer appends for it), built once per tokenizer
// and shared. Special tokens are flagged: their text never reaches the output.
struct TokenTable {
  std::vector<std::string> bytes;  // [vocab]
  std::vector<uint8_t> special;    // [vocab]
};
const TokenTable& token_table(const Tokenizer& tok);

struct ToolCallSpec {
  ToolFormat format = ToolFormat::QWEN3_JSON;
  std::vector<std::string> names;        // the tools it may call (one: a named tool_choice)
  nlohmann::json tools;                  // OpenAI chat tools (XML: parameter names)
  bool close_reasoning = false;          // the prompt left <think> open: emit </think> first
};

// The byte-level grammar of one forced tool call. Copyable and small (trying a token copies
// it). JSON form: `<tool_call>\n{"name": "N", "arguments": ` JSON-object `}\n</tool_call>`.
// XML form: `<tool_call>\n<function=N>\n` (`<parameter=P>\n` value `\n</parameter>\n`)*
// `</function>\n</tool_call>`, P from the tool's schema; values may not contain '<' except to
// start their closing tag. Harmony form (gpt-oss): `<|channel|>commentary to=functions.N
// <|constrain|>json<|message|>` JSON-object, ended by the caller's stop token (<|call|>); its
// special tokens are literal text here, which the processor lets special-token ids spell.
// Outside strings, JSON whitespace is single and never leads (a weak model would otherwise pad
// with spaces until its budget runs out).
class ToolCallGrammar {
 public:
  explicit ToolCallGrammar(const ToolCallSpec& spec);
  bool feed(unsigned char c);      // false: c is not allowed (state unchanged)
  bool feed(std::string_view s);   // false at the first refused byte (state then undefined)
  bool at_end() const { return phase_ == Phase::END; }
  // In fixed text (a tag or literal), where Harmony's special tokens may be spelled.
  bool in_literal() const {
    return phase_ == Phase::OPEN || phase_ == Phase::ITEM || phase_ == Phase::CLOSE;
  }
  std::string completion() const;  // text that ends the call from here
  std::string forced() const;      // text every continuation must start with (may be empty)

 private:
  struct Literals {  // sorted; none is a prefix of another
    std::vector<std::string> alts;
  };
  struct Shared {
    ToolFormat format;
    Literals openers;
    std::vector<std::string> opener_names;  // name of each (sorted) opener
    std::vector<Literals> items;            // XML, per opener: parameter openers + closer
    Literals closer;
  };
  enum class Phase : uint8_t { OPEN, ARGS, ITEM, VALUE, TERM, CLOSE, END };
  bool lit_feed(unsigned char c);
  void lit_start(const Literals* l) { lit_ = l, lo_ = 0, hi_ = l->alts.size(), pos_ = 0; }
  void lit_done();

  std::shared_ptr<const Shared> g_;
  Phase phase_ = Phase::OPEN;
  const Literals* lit_ = nullptr;  // OPEN / ITEM / CLOSE: alternatives [lo_, hi_) still match
  uint32_t lo_ = 0, hi_ = 0, pos_ = 0;
  int32_t chosen_ = -1;            // opener index
  JsonPrefix json_{true};
  uint8_t term_ = 0;               // TERM: bytes of "\n</parameter>\n" matched
  bool nl_ = false;                // VALUE: the last byte was '\n'
  bool ws_ = false;                // ARGS: the last byte was whitespace outside a string
};

// A processor forcing `spec`'s tool call, then one of eos_ids. max_tokens is the request's
// budget: near it the call is closed by the shortest completion so it still parses.
std::shared_ptr<LogitsProcessor> make_tool_call_constraint(const Tokenizer& tok,
                                                           const ToolCallSpec& spec,
                                                           std::vector<int32_t> eos_ids,
                                                           int64_t max_tokens);

}  // namespace ft::server
