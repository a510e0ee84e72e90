// Chat templates: a model's Jinja chat template, rendered for an OpenAI-style chat request the
// way transformers' apply_chat_template does (plus vLLM's request normalisation, see below).
#pragma once
#include <nlohmann/json.hpp>

#include <memory>
#include <string>

namespace ft {

namespace jinja {
class Template;
}

class ChatTemplate {
 public:
  // `model_dir` holds chat_template.jinja (preferred, as in transformers), chat_template.json or
  // tokenizer_config.json["chat_template"] (a string, or a list of {name, template}: "default"
  // is used). bos_token/eos_token come from tokenizer_config.json (strings or {"content": ..}).
  // A path to a template file is accepted too. Throws ft::Error when nothing is found.
  static ChatTemplate load(const std::string& model_dir);
  static ChatTemplate from_string(const std::string& source, std::string bos_token = "",
                                  std::string eos_token = "");

  // Renders an OpenAI chat request body: messages, tools, add_generation_prompt (default true),
  // reasoning_effort, chat_template_kwargs (merged last). Parse the body as ordered_json so key
  // order (e.g. of tool schemas, which `tojson` prints) is kept; nlohmann::json sorts keys.
  // Template errors throw ft::Error; raise_exception() throws with the template's message.
  std::string render(const nlohmann::ordered_json& request) const;
  std::string render(const nlohmann::json& request) const;

  // The template variables `render` uses for `request` (for tests and debugging).
  //  - content given as a list of parts is joined with "\n" (text parts only) unless the
  //    template loops over message content, in which case parts are passed as-is (vLLM's
  //    "string" vs "openai" content formats);
  //  - content null becomes "" unless the template tests `content is none`;
  //  - tool_calls[].function.arguments, a JSON string per OpenAI, is parsed into an object
  //    (what vLLM does and what templates such as Qwen3's and gpt-oss's expect), unless the
  //    template only renders with string arguments (e.g. DeepSeek-V3 concatenates them),
  //    which load() finds by rendering a probe conversation both ways;
  //  - reasoning_content is also passed as `thinking` to templates that read `thinking`
  //    and never `reasoning_content` (gpt-oss).
  nlohmann::ordered_json context(const nlohmann::ordered_json& request) const;

  const std::string& source() const { return source_; }
  const std::string& bos_token() const { return bos_; }
  const std::string& eos_token() const { return eos_; }

 private:
  std::shared_ptr<const jinja::Template> tpl_;
  std::string source_, bos_, eos_;
  bool content_parts_ = false;       // template iterates over message content
  bool keep_null_content_ = false;   // template tests `content is none`
  bool string_arguments_ = false;    // template needs tool-call arguments as a JSON string
  bool thinking_alias_ = false;      // template reads `thinking`, not `reasoning_content`

  nlohmann::ordered_json normalize_message(const nlohmann::ordered_json& m) const;
  void detect_conventions();
};

}  // namespace ft
