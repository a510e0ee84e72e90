// Harmony output parser (gpt-oss): splits <|channel|>…<|message|>…<|end|> messages into
// reasoning (analysis), content (final, commentary preambles) and function tool calls.
#pragma once
#include "server/parsers/json_prefix.h"
#include "server/parsers/parsers.h"

namespace ft::server {

// The text is the model's output with special tokens kept (Request::skip_special = false), after
// a prompt ending in `<|start|>assistant`. Each message is a header, <|message|>, a body and a
// terminator (<|end|>, <|call|>, <|return|>, or the next <|start|> / <|channel|>, or the end of
// the output). The header carries the channel (`<|channel|>analysis`), an optional recipient
// (` to=functions.NAME`, before or after the channel) and an optional content type
// (` <|constrain|>json` or ` json`). Bodies go to:
//  - analysis, or a recipient that is not `functions.*` (built-in tools): reasoning;
//  - recipient `functions.NAME` with tools enabled: a tool call NAME whose arguments are the
//    body (JSON). Whole (stream_arguments false): a body that is not a JSON object becomes
//    content. Streamed: arguments are handed out while they stay a JSON-object prefix; a bad
//    byte closes them (completed to valid JSON) and drops the rest of the body;
//  - anything else (final, commentary without a recipient, no channel): content.
// Text before any header (output that ignores the format) is content verbatim. A header cut off
// by the end of the output is dropped; one that runs past 256 bytes without <|message|> is
// passed through as content without its special tokens (<|message|> / <|constrain|> inside any
// body are dropped). Harmony special tokens never reach the output. A second message of the same kind is separated from the first by a blank line.
class HarmonyParser final : public ToolCallParser {
 public:
  HarmonyParser(bool parse_tools, bool stream_arguments)
      : tools_(parse_tools), stream_(stream_arguments) {}
  ToolParseResult feed(std::string_view delta) override;
  ToolParseResult finish() override;

 private:
  enum class Mode { HEADER, BODY };
  enum class Kind { CONTENT, REASONING, CALL };
  void run(ToolParseResult& out, bool final);
  void open_message(std::string_view header);
  void body_text(ToolParseResult& out, std::string_view text);
  void close_message(ToolParseResult& out);

  bool tools_, stream_;
  Mode mode_ = Mode::HEADER;
  Kind kind_ = Kind::CONTENT;
  std::string buf_;          // text not yet handled
  std::string name_, args_;  // CALL: the function; arguments so far (whole mode)
  JsonPrefix json_{true};    // CALL, streamed: the arguments handed out so far
  bool broken_ = false;      // CALL, streamed: a bad byte ended the arguments
  bool said_reasoning_ = false, said_content_ = false;  // text of that kind was emitted
  bool gap_ = false;  // a new message started: separate it from the last one
};

}  // namespace ft::server
