// Tokenizer loading (tokenizer.json, tokenizer_config.json) and the encode/decode pipelines.
#include "tokenizer/tokenizer.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/error.h"
#include "io/gguf.h"
#include "tokenizer/unicode.h"

namespace ft {

namespace {

nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("cannot read {}; check the path and permissions", path);
  std::stringstream ss;
  ss << f.rdbuf();
  try {
    return nlohmann::json::parse(ss.str());
  } catch (const nlohmann::json::exception& e) {
    fail("{}: malformed JSON ({}); re-download the file", path, e.what());
  }
}

// tokenizer_config.json spells tokens as "x" or {"content": "x", ...}.
std::string token_text(const nlohmann::json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("content")) return j["content"].get<std::string>();
  return "";
}

}  // namespace

Tokenizer Tokenizer::load(const std::string& dir) {
  namespace fs = std::filesystem;
  if (is_gguf_path(dir)) return load_gguf(dir);
  fs::path base(dir);
  fs::path file = fs::is_directory(base) ? base / "tokenizer.json" : base;
  if (!fs::exists(file))
    fail("{} not found; pass a model directory that holds the Hugging Face tokenizer.json",
         file.string());
  const std::string where = file.string();
  Tokenizer tok = from_json(read_json(where), where);
  fs::path config = file.parent_path() / "tokenizer_config.json";
  if (fs::exists(config)) tok.load_config(config.string());
  return tok;
}

Tokenizer Tokenizer::from_json(const nlohmann::json& j, const std::string& where) {
  Tokenizer tok;
  try {
    if (!j.is_object() || !j.contains("model"))
      fail("{}: no \"model\" section; this is not a Hugging Face tokenizer.json", where);
    const auto& model = j["model"];
    std::string type = model.value("type", "BPE");
    if (type != "BPE")
      fail("{}: model type '{}' is not supported (supported: BPE); use a BPE tokenizer", where,
           type);
    tok.normalizer_ = Normalizer::from_json(j.value("normalizer", nlohmann::json()), where);
    tok.pre_tokenizer_ = PreTokenizer::from_json(j.value("pre_tokenizer", nlohmann::json()), where);
    tok.bpe_ = Bpe::from_json(model, tok.pre_tokenizer_.byte_level(), where);
    tok.decoder_ = Decoder::from_json(j.value("decoder", nlohmann::json()), where);

    std::vector<AddedToken> added;
    std::vector<std::string> normalized;
    for (const auto& t : j.value("added_tokens", nlohmann::json::array())) {
      AddedToken a{.id = t.at("id").get<int32_t>(),
                   .content = t.at("content").get<std::string>(),
                   .single_word = t.value("single_word", false),
                   .lstrip = t.value("lstrip", false),
                   .rstrip = t.value("rstrip", false),
                   .normalized = t.value("normalized", false),
                   .special = t.value("special", false)};
      normalized.push_back(a.normalized ? tok.normalizer_.apply(a.content) : a.content);
      added.push_back(std::move(a));
    }
    tok.vocab_size_ = tok.bpe_.vocab_size();
    for (const auto& a : added) tok.vocab_size_ = std::max(tok.vocab_size_, size_t(a.id) + 1);
    tok.added_.build(std::move(added), normalized);
    tok.load_post_processor(j.value("post_processor", nlohmann::json()), where);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: unexpected structure ({}); re-download the file", where, e.what());
  }
  return tok;
}

void Tokenizer::load_post_processor(const nlohmann::json& j, const std::string& where) {
  if (j.is_null()) return;
  std::string type = j.at("type").get<std::string>();
  if (type == "Sequence") {
    for (const auto& p : j.at("processors")) load_post_processor(p, where);
  } else if (type == "ByteLevel") {
    // Only offsets change; ids are untouched.
  } else if (type == "TemplateProcessing") {
    const auto& specials = j.value("special_tokens", nlohmann::json::object());
    bool after = false;
    for (const auto& item : j.at("single")) {
      if (item.contains("Sequence")) {
        after = true;
        continue;
      }
      std::string name = item.at("SpecialToken").at("id").get<std::string>();
      if (!specials.contains(name)) fail("{}: template token '{}' has no ids", where, name);
      for (const auto& id : specials[name].at("ids")) (after ? suffix_ : prefix_).push_back(id);
    }
  } else if (type == "RobertaProcessing" || type == "BertProcessing") {
    prefix_.push_back(j.at("cls").at(1).get<int32_t>());
    suffix_.push_back(j.at("sep").at(1).get<int32_t>());
  } else {
    fail("{}: post_processor type '{}' is not supported (supported: Sequence, ByteLevel, "
         "TemplateProcessing, RobertaProcessing, BertProcessing)",
         where, type);
  }
}

void Tokenizer::load_config(const std::string& path) {
  nlohmann::json c = read_json(path);
  if (!c.is_object()) fail("{}: expected a JSON object", path);
  auto id_of = [&](const char* key) {
    if (!c.contains(key)) return -1;
    std::string t = token_text(c[key]);
    return t.empty() ? -1 : token_id(t);
  };
  bos_id_ = id_of("bos_token");
  eos_id_ = id_of("eos_token");
  // transformers' Llama/Gemma fast tokenizers rebuild the post-processor from these flags.
  if (c.contains("add_bos_token") && c["add_bos_token"].is_boolean()) {
    prefix_.clear();
    if (c["add_bos_token"].get<bool>() && bos_id_ >= 0) prefix_.push_back(bos_id_);
  }
  if (c.contains("add_eos_token") && c["add_eos_token"].is_boolean()) {
    suffix_.clear();
    if (c["add_eos_token"].get<bool>() && eos_id_ >= 0) suffix_.push_back(eos_id_);
  }
}

void Tokenizer::encode_text(std::string_view text, bool first, std::vector<int32_t>& out) const {
  pre_tokenizer_.run(text, first, [&](std::string_view word) { bpe_.encode_word(word, out); });
}

void Tokenizer::encode_into(std::string_view text, bool add_special,
                            std::vector<int32_t>& out) const {
  std::string repaired;
  if (!utf8::is_valid(text)) {
    repaired = utf8::lossy(text);
    text = repaired;
  }
  if (add_special) out.insert(out.end(), prefix_.begin(), prefix_.end());
  for (const AddedSplit& s : added_.split(text, false)) {
    if (s.id >= 0) {
      out.push_back(s.id);
      continue;
    }
    std::string_view part = text.substr(s.b, s.e - s.b);
    bool first = s.b == 0;
    if (normalizer_.empty() && !added_.has_normalized()) {
      encode_text(part, first, out);
      continue;
    }
    std::string norm = normalizer_.empty() ? std::string(part) : normalizer_.apply(std::string(part));
    for (const AddedSplit& n : added_.split(norm, true)) {
      if (n.id >= 0) {
        out.push_back(n.id);
      } else {
        encode_text(std::string_view(norm).substr(n.b, n.e - n.b), first && n.b == 0, out);
      }
    }
  }
  if (add_special) out.insert(out.end(), suffix_.begin(), suffix_.end());
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  encode_into(text, add_special, out);
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (const AddedToken* a = added_.by_id(id)) {
      if (!(skip_special && a->special)) tokens.push_back(a->content);
    } else if (id >= 0 && size_t(id) < bpe_.vocab_size() && !bpe_.vocab()[id].empty()) {
      tokens.push_back(bpe_.vocab()[id]);
    }
  }
  return decoder_.decode(std::move(tokens));
}

std::string_view Tokenizer::piece(int32_t id) const {
  if (const AddedToken* a = added_.by_id(id)) return a->content;
  if (id >= 0 && size_t(id) < bpe_.vocab_size()) return bpe_.vocab()[id];
  return {};
}

int32_t Tokenizer::token_id(std::string_view token) const {
  int32_t id = added_.id_of(token);
  return id >= 0 ? id : bpe_.token_id(token);
}

bool Tokenizer::is_special(int32_t id) const {
  const AddedToken* a = added_.by_id(id);
  return a && a->special;
}

}  // namespace ft
