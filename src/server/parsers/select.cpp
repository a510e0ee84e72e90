// Parser selection by model, and helpers shared by the parsers.
#include "server/parsers/parsers.h"
#include "server/parsers/harmony.h"
#include "server/parsers/qwen3_tool.h"
#include "server/parsers/qwen3_xml_tool.h"
#include "server/server.h"

namespace ft::server {

size_t partial_tag_len(std::string_view text, std::string_view tag) {
  if (tag.empty()) return 0;
  for (size_t k = std::min(tag.size() - 1, text.size()); k > 0; --k)
    if (text.substr(text.size() - k) == tag.substr(0, k)) return k;
  return 0;
}

ParserChoice select_parsers(const ServerContext& ctx) {
  const Tokenizer& tok = ctx.engine.tokenizer();
  ParserChoice c;
  if (tok.token_id("<|start|>") >= 0 && tok.token_id("<|channel|>") >= 0 &&
      tok.token_id("<|message|>") >= 0 && tok.token_id("<|end|>") >= 0) {
    c.tools = ToolFormat::HARMONY;
    return c;
  }
  c.reasoning = tok.token_id("<think>") >= 0 && tok.token_id("</think>") >= 0;
  if (ctx.chat_template && tok.token_id("<tool_call>") >= 0)
    c.tools = ctx.chat_template->source().find("<function=") != std::string::npos
                  ? ToolFormat::QWEN3_XML
                  : ToolFormat::QWEN3_JSON;
  return c;
}

bool prompt_opens_reasoning(std::string_view prompt) {
  while (!prompt.empty() && (prompt.back() == '\n' || prompt.back() == ' ' ||
                             prompt.back() == '\t' || prompt.back() == '\r'))
    prompt.remove_suffix(1);
  return prompt.ends_with("<think>");
}

std::unique_ptr<ToolCallParser> make_tool_parser(ToolFormat format, const nlohmann::json& tools,
                                                 bool stream_arguments) {
  switch (format) {
    case ToolFormat::QWEN3_JSON: return std::make_unique<Qwen3ToolParser>(stream_arguments);
    case ToolFormat::QWEN3_XML:
      return std::make_unique<Qwen3XmlToolParser>(tools, stream_arguments);
    case ToolFormat::HARMONY:
      return std::make_unique<HarmonyParser>(tools.is_array() && !tools.empty(), stream_arguments);
    case ToolFormat::NONE: break;
  }
  return nullptr;
}

}  // namespace ft::server
