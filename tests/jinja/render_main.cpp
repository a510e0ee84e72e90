// ft_jinja_render: render a chat request with a model's chat template (parity-test driver).
// Usage: ft_jinja_render <model-dir-or-template-file> <request.json> [--context]
//   prints the rendered prompt, or with --context the template variables as JSON.
// Exit 0 on success; on error prints "error: <message>" to stdout and exits 2.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "base/error.h"
#include "tokenizer/chat_template.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s <model-dir-or-template> <request.json> [--context]\n", argv[0]);
    return 1;
  }
  bool context = argc > 3 && std::string(argv[3]) == "--context";
  try {
    std::ifstream f(argv[2], std::ios::binary);
    if (!f) ft::fail("cannot read {}", argv[2]);
    std::stringstream ss;
    ss << f.rdbuf();
    auto request = nlohmann::ordered_json::parse(ss.str());
    auto tpl = ft::ChatTemplate::load(argv[1]);
    if (context) {
      std::cout << tpl.context(request).dump(2) << "\n";
    } else {
      std::cout << tpl.render(request);
    }
  } catch (const std::exception& e) {
    std::cout << "error: " << e.what();
    return 2;
  }
  return 0;
}
