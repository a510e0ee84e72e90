// Qwen3 / Hermes tool calls: <tool_call>\n{"name": NAME, "arguments": {…}}\n</tool_call>.
#pragma once
#include "server/parsers/json_prefix.h"
#include "server/parsers/tagged_tool.h"

namespace ft::server {

// The name is announced once `{"name": "…", "arguments": ` has been read; the arguments are
// then streamed while they stay a valid JSON prefix. A block of another shape (e.g. arguments
// before name) is parsed whole at </tool_call>; one that is not JSON with a string "name"
// stays content.
class Qwen3ToolParser final : public TaggedToolParser {
 public:
  explicit Qwen3ToolParser(bool stream_arguments) : TaggedToolParser(stream_arguments) {}

 private:
  Body parse_body(bool final) override;
  void reset_body() override { header_ = true; }
  bool parse_block(std::string_view body, std::string* name, std::string* args) override;

  bool header_ = true;  // still reading `{"name": "…", "arguments": `
  JsonPrefix json_;     // the arguments so far
};

}  // namespace ft::server
