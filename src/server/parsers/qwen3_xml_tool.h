// Qwen3.5 / Qwen3.6 / Qwen3-Coder tool calls in XML:
//   <tool_call>\n<function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n</function>\n</tool_call>
#pragma once
#include <nlohmann/json.hpp>

#include "server/parsers/tagged_tool.h"

namespace ft::server {

// Values are typed from the tool's JSON schema (parameters.properties[P].type): integer/number,
// boolean, object/array parsed as JSON, "null" as null; a value that does not parse as its
// type, an untyped or unknown parameter, stays a string. Arguments stream one parameter at a
// time as a JSON object (`{"P": v, "Q": w}`).
class Qwen3XmlToolParser final : public TaggedToolParser {
 public:
  Qwen3XmlToolParser(nlohmann::json tools, bool stream_arguments)
      : TaggedToolParser(stream_arguments), tools_(std::move(tools)) {}

  // A parameter's value text typed by its schema (nullptr: none).
  static nlohmann::json typed_value(const nlohmann::json* schema, const std::string& text);

 private:
  Body parse_body(bool final) override;
  void reset_body() override {
    header_ = true;
    first_ = true;
    props_ = nullptr;
  }
  Body close_args(Body b);

  nlohmann::json tools_;  // OpenAI chat tools: [{type, function: {name, parameters}}]
  bool header_ = true;    // still reading <function=NAME>
  bool first_ = true;     // no parameter emitted yet
  const nlohmann::json* props_ = nullptr;  // the called tool's parameters.properties
};

}  // namespace ft::server
