// Jinja template: parse once, render many times with a context, like HF's
// ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) + loopcontrols.
#pragma once
#include <nlohmann/json.hpp>

#include <memory>
#include <string>

#include "base/error.h"
#include "tokenizer/jinja/value.h"

namespace ft::jinja {

struct Program;

// raise_exception(msg) called by a template; what() is the template's message verbatim.
struct TemplateRaise : Error {
  using Error::Error;
};

class Template {
 public:
  // Parses `source`; syntax errors throw ft::Error naming the construct and line.
  explicit Template(const std::string& source);
  // Renders with `context` (a dict) as the template's top-level variables. Runtime errors throw
  // ft::Error with the template line; raise_exception throws TemplateRaise.
  std::string render(const Value& context) const;
  std::string render(const nlohmann::ordered_json& context) const;

 private:
  std::shared_ptr<const Program> program_;
};

}  // namespace ft::jinja
