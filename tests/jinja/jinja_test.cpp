// Unit tests of the Jinja interpreter: a table of templates whose expected output comes from
// Python jinja2 (gen_unit_cases.py), plus syntax/runtime error messages and whitespace control.
#include <gtest/gtest.h>

#include <string>

#include "base/error.h"
#include "tokenizer/jinja/template.h"

using ft::jinja::Template;

namespace {

struct UnitCase {
  const char* tpl;
  const char* expected;
  bool is_error;
};
#include "unit_cases.inc"

std::string render(const std::string& tpl, const nlohmann::ordered_json& ctx = {}) {
  return Template(tpl).render(ctx.is_null() ? nlohmann::ordered_json::object() : ctx);
}

std::string error_of(const std::string& tpl, const nlohmann::ordered_json& ctx = {}) {
  try {
    render(tpl, ctx);
  } catch (const ft::Error& e) {
    return e.what();
  }
  return "<no error>";
}

TEST(Jinja, MatchesPythonJinja2) {
  auto ctx = nlohmann::ordered_json::parse(kUnitContext);
  for (const UnitCase& c : kUnitCases) {
    SCOPED_TRACE(c.tpl);
    if (c.is_error) {
      EXPECT_THROW(render(c.tpl, ctx), ft::Error) << "jinja2 fails with: " << c.expected;
    } else {
      std::string got;
      EXPECT_NO_THROW(got = render(c.tpl, ctx));
      EXPECT_EQ(got, c.expected);
    }
  }
}

TEST(Jinja, RaiseExceptionKeepsMessage) {
  try {
    render("{{ raise_exception('Roles must alternate') }}");
    FAIL() << "no exception";
  } catch (const ft::jinja::TemplateRaise& e) {
    EXPECT_STREQ(e.what(), "Roles must alternate");
  }
}

TEST(Jinja, SyntaxErrorsNameConstructAndLine) {
  EXPECT_NE(error_of("line1\n{% include 'x.jinja' %}").find("line 2"), std::string::npos);
  EXPECT_NE(error_of("{% include 'x.jinja' %}").find("unsupported statement '{% include %}'"),
            std::string::npos);
  EXPECT_NE(error_of("a\nb\n{% if x %}never closed").find("unexpected end of template"), std::string::npos);
  EXPECT_NE(error_of("{{ x + }}").find("line 1"), std::string::npos);
  EXPECT_NE(error_of("\n\n{{ 'unterminated }}").find("unterminated string"), std::string::npos);
  EXPECT_NE(error_of("{% for x in y recursive %}{% endfor %}").find("recursive"),
            std::string::npos);
  EXPECT_NE(error_of("{% call foo() %}{% endcall %}").find("'{% call %}'"), std::string::npos);
  EXPECT_NE(error_of("{# open comment").find("comment"), std::string::npos);
}

TEST(Jinja, RuntimeErrorsNameLine) {
  std::string e = error_of("ok\n\n{{ 'a' + 1 }}");
  EXPECT_NE(e.find("line 3"), std::string::npos) << e;
  EXPECT_NE(e.find("can only concatenate str"), std::string::npos) << e;
  e = error_of("{{ x|nosuchfilter }}");
  EXPECT_NE(e.find("unsupported filter 'nosuchfilter'"), std::string::npos) << e;
  e = error_of("{{ x is nosuchtest }}");
  EXPECT_NE(e.find("unsupported test 'nosuchtest'"), std::string::npos) << e;
  e = error_of("{{ missing.attr }}");
  EXPECT_NE(e.find("'missing' is undefined"), std::string::npos) << e;
  e = error_of("{{ d.a.b }}", {{"d", nlohmann::ordered_json::object()}});
  EXPECT_NE(e.find("'dict object' has no attribute 'a'"), std::string::npos) << e;
  // An unknown filter in a branch that never runs is not an error.
  EXPECT_EQ(render("{% if false %}{{ x|nosuchfilter }}{% endif %}ok"), "ok");
}

TEST(Jinja, WhitespaceControl) {
  // HF: trim_blocks + lstrip_blocks; one trailing newline of the template is dropped.
  EXPECT_EQ(render("a\n  {% if true %}\n  b\n  {% endif %}\nc\n"), "a\n  b\nc");
  EXPECT_EQ(render("a  {%- if true -%}  b  {%- endif -%}  c"), "abc");
  EXPECT_EQ(render("a\n{{- 1 -}}\nb"), "a1b");
  EXPECT_EQ(render("  {{ 1 }}  {% if true %}x{% endif %}"), "  1  x");
  EXPECT_EQ(render("x {%+ if true %}y{% endif %}"), "x y");
  EXPECT_EQ(render("{% if true +%}\nkeep{% endif %}"), "\nkeep");
  EXPECT_EQ(render("{# c #}\n  {# d #}\nx"), "x");
  EXPECT_EQ(render("{% raw %}{{ a }}{% endraw %}"), "{{ a }}");
  EXPECT_EQ(render("a\r\nb"), "a\nb");
}

TEST(Jinja, PythonValueRendering) {
  auto ctx = nlohmann::ordered_json::parse(
      R"({"d": {"z": 1, "a": [true, null, 1.0, "it's"]}, "f": 0.1})");
  EXPECT_EQ(render("{{ d }}", ctx), "{'z': 1, 'a': [True, None, 1.0, \"it's\"]}");
  EXPECT_EQ(render("{{ d|tojson }}", ctx), R"({"z": 1, "a": [true, null, 1.0, "it's"]})");
  EXPECT_EQ(render("{{ f * 3 }}", ctx), "0.30000000000000004");
}

}  // namespace
