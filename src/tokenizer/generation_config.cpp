// generation_config.json reading and the stop-token set.
#include "tokenizer/generation_config.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "tokenizer/tokenizer.h"

namespace ft {

GenerationConfig GenerationConfig::load(const std::string& dir) {
  GenerationConfig g;
  std::filesystem::path path = std::filesystem::path(dir) / "generation_config.json";
  if (!std::filesystem::exists(path)) return g;
  std::ifstream f(path);
  if (!f) fail("cannot read {}; check its permissions", path.string());
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(f);
    if (!j.is_object()) fail("{}: expected a JSON object; fix or delete the file", path.string());
    if (j.contains("eos_token_id")) {
      const auto& e = j["eos_token_id"];
      if (e.is_number_integer()) {
        g.eos_token_ids.push_back(e.get<int32_t>());
      } else if (e.is_array()) {
        for (const auto& x : e) g.eos_token_ids.push_back(x.get<int32_t>());
      } else if (!e.is_null()) {
        fail("{}: eos_token_id must be an int or a list of ints", path.string());
      }
    }
    auto opt = [&](const char* key, auto& field) {
      if (j.contains(key) && !j[key].is_null())
        field = j[key].get<typename std::remove_reference_t<decltype(field)>::value_type>();
    };
    opt("bos_token_id", g.bos_token_id);
    opt("pad_token_id", g.pad_token_id);
    opt("temperature", g.temperature);
    opt("top_p", g.top_p);
    opt("top_k", g.top_k);
    opt("min_p", g.min_p);
    opt("repetition_penalty", g.repetition_penalty);
    opt("do_sample", g.do_sample);
    opt("max_new_tokens", g.max_new_tokens);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: malformed ({}); fix or delete the file", path.string(), e.what());
  }
  return g;
}

std::vector<int32_t> stop_token_ids(const GenerationConfig& gen, const Tokenizer& tok) {
  std::vector<int32_t> ids = gen.eos_token_ids;
  if (tok.eos_id() >= 0) ids.push_back(tok.eos_id());
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

}  // namespace ft
