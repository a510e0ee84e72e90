// GGUF tokenizer -> tokenizer.json + tokenizer_config.json (fast-load checkpoints from GGUF).
#include "tokenizer/gguf_hf_files.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "io/gguf.h"
#include "tokenizer/gguf_vocab.h"

namespace ft {

void write_gguf_tokenizer_as_hf(const std::string& gguf, const std::string& out_dir) {
  auto g = GgufSet::open(gguf);
  const GgufSpecialTokens sp = gguf_special_tokens(*g);
  nlohmann::json tc = {{"add_bos_token", sp.add_bos}, {"add_eos_token", sp.add_eos}};
  std::string tmpl, bos, eos;
  if (gguf_chat_template(gguf, &tmpl, &bos, &eos)) {
    tc["chat_template"] = tmpl;
    tc["bos_token"] = bos;
    tc["eos_token"] = eos;
  }
  for (const auto& [name, body] :
       {std::pair{std::string("/tokenizer.json"), gguf_tokenizer_json(*g).dump()},
        std::pair{std::string("/tokenizer_config.json"), tc.dump(2)}}) {
    std::ofstream f(out_dir + name);
    f << body;
    if (!f) fail("cannot write {}{}: {}", out_dir, name, std::strerror(errno));
  }
}

}  // namespace ft
