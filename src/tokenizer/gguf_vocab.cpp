// GGUF tokenizer metadata <-> tokenizer.json: the GGUF side names a tokenizer model and a
// pre-tokenizer; the tokenizer.json side spells them out, so both feed the same Tokenizer.
#include "tokenizer/gguf_vocab.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/error.h"
#include "io/mmap.h"
#include "tokenizer/tokenizer.h"

namespace ft {

namespace {

using json = nlohmann::json;

// GGUF token types (llama.cpp's llama_token_type).
enum TokenType : int32_t {
  NORMAL = 1,
  UNKNOWN = 2,
  CONTROL = 3,
  USER_DEFINED = 4,
  UNUSED = 5,
  BYTE = 6
};

// Pre-tokenizer regexes as the models' tokenizer.json files spell them (PCRE2 reads them as-is).
constexpr const char* k_gpt2_regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr const char* k_qwen2_regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* k_llama3_regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct PreType {
  std::vector<const char*> names;    // tokenizer.ggml.pre values
  std::vector<const char*> regexes;  // applied in sequence, each piece split again
  bool ignore_merges;                // whole-word vocab hits skip the merges (llama 3)
  bool add_bos;                      // llama.cpp's default when add_bos_token is absent
};
// llama.cpp's "default" is its own sequence of four splits.
const PreType k_pre_types[] = {
    {{"gpt2", "mpt", "olmo", "jais"}, {k_gpt2_regex}, false, false},
    {{"qwen2", "stablelm2", "hunyuan"}, {k_qwen2_regex}, false, false},
    {{"llama-bpe", "llama3", "llama-v3", "dbrx", "smaug-bpe"}, {k_llama3_regex}, true, true},
    {{"default"},
     {R"([\p{P}\$\+<=>\^~\|]+)",
      R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))", R"(\p{N}+)",
      "[0-9][0-9][0-9]"},
     false,
     false},
};

const PreType* find_pre(const std::string& name) {
  for (const PreType& p : k_pre_types)
    for (const char* n : p.names)
      if (name == n) return &p;
  return nullptr;
}

std::string pre_names() {
  std::string s;
  for (const PreType& p : k_pre_types)
    for (const char* n : p.names) s += (s.empty() ? "" : ", ") + std::string(n);
  return s;
}

std::vector<int32_t> token_types(const GgufSet& g, size_t n) {
  std::vector<int32_t> types(n, NORMAL);
  if (!g.has("tokenizer.ggml.token_type")) return types;
  std::vector<double> t = g.get_numbers("tokenizer.ggml.token_type");
  if (t.size() != n)
    fail("{}: tokenizer.ggml.token_type has {} entries for {} tokens", g.path(), t.size(), n);
  for (size_t i = 0; i < n; ++i) types[i] = static_cast<int32_t>(t[i]);
  return types;
}

json added_tokens(const std::vector<std::string>& tokens, const std::vector<int32_t>& types) {
  json added = json::array();
  for (size_t i = 0; i < tokens.size(); ++i)
    if (types[i] == CONTROL || types[i] == USER_DEFINED)
      added.push_back({{"id", i},
                       {"content", tokens[i]},
                       {"single_word", false},
                       {"lstrip", false},
                       {"rstrip", false},
                       {"normalized", false},
                       {"special", types[i] == CONTROL}});
  return added;
}

json vocab_object(const std::vector<std::string>& tokens, const std::string& path) {
  json vocab = json::object();
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (vocab.contains(tokens[i]))  // later duplicates keep the first id (as HF's vocab would)
      continue;
    vocab[tokens[i]] = i;
  }
  if (vocab.empty()) fail("{}: tokenizer.ggml.tokens is empty", path);
  return vocab;
}

json split_step(const char* regex) {
  return {{"type", "Split"},
          {"pattern", {{"Regex", regex}}},
          {"behavior", "Isolated"},
          {"invert", false}};
}

// Byte-level BPE (tokenizer.ggml.model "gpt2").
json bpe_json(const GgufSet& g, const std::vector<std::string>& tokens,
              const std::vector<int32_t>& types) {
  const std::string pre_name = g.get_string_or("tokenizer.ggml.pre", "default");
  const PreType* pre = find_pre(pre_name);
  if (!pre)
    fail("{}: tokenizer.ggml.pre '{}' is not supported (supported: {})", g.path(), pre_name,
         pre_names());
  json merges = json::array();
  if (g.has("tokenizer.ggml.merges"))
    for (auto& m : g.get_strings("tokenizer.ggml.merges")) merges.push_back(std::move(m));
  json steps = json::array();
  for (const char* r : pre->regexes) steps.push_back(split_step(r));
  steps.push_back({{"type", "ByteLevel"},
                   {"add_prefix_space", false},
                   {"trim_offsets", true},
                   {"use_regex", false}});
  return {{"model",
           {{"type", "BPE"},
            {"vocab", vocab_object(tokens, g.path())},
            {"merges", merges},
            {"ignore_merges", pre->ignore_merges},
            {"byte_fallback", false}}},
          {"normalizer", nullptr},
          {"pre_tokenizer", {{"type", "Sequence"}, {"pretokenizers", steps}}},
          {"decoder",
           {{"type", "ByteLevel"},
            {"add_prefix_space", true},
            {"trim_offsets", true},
            {"use_regex", true}}},
          {"added_tokens", added_tokens(tokens, types)},
          {"post_processor", nullptr}};
}

// SentencePiece-style BPE (tokenizer.ggml.model "llama"): merges rebuilt from the scores — every
// split of a token into two vocabulary pieces is a merge, ranked by the merged token's score
// (higher first), as SentencePiece's BPE applies them.
json spm_json(const GgufSet& g, const std::vector<std::string>& tokens,
              const std::vector<int32_t>& types) {
  std::vector<double> scores(tokens.size(), 0.0);
  if (g.has("tokenizer.ggml.scores")) {
    scores = g.get_numbers("tokenizer.ggml.scores");
    if (scores.size() != tokens.size())
      fail("{}: tokenizer.ggml.scores has {} entries for {} tokens", g.path(), scores.size(),
           tokens.size());
  }
  StringMap<int32_t> normal;
  for (size_t i = 0; i < tokens.size(); ++i)
    if (types[i] == NORMAL || types[i] == USER_DEFINED) normal.emplace(tokens[i], int32_t(i));
  struct Merge {
    int32_t merged, left, right;
    size_t cut;
  };
  std::vector<Merge> merges;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (types[i] != NORMAL) continue;
    const std::string& t = tokens[i];
    for (size_t cut = 1; cut < t.size(); ++cut) {
      if ((static_cast<unsigned char>(t[cut]) & 0xc0) == 0x80) continue;  // inside a character
      auto l = normal.find(std::string_view(t).substr(0, cut));
      auto r = normal.find(std::string_view(t).substr(cut));
      if (l != normal.end() && r != normal.end())
        merges.push_back({int32_t(i), l->second, r->second, cut});
    }
  }
  std::stable_sort(merges.begin(), merges.end(), [&](const Merge& a, const Merge& b) {
    if (scores[a.merged] != scores[b.merged]) return scores[a.merged] > scores[b.merged];
    if (a.merged != b.merged) return a.merged < b.merged;
    return a.left < b.left;
  });
  json mj = json::array();
  for (const Merge& m : merges) mj.push_back(json::array({tokens[m.left], tokens[m.right]}));
  const int64_t unk = g.get_int_or("tokenizer.ggml.unknown_token_id", 0);
  const bool prefix = g.get_bool_or("tokenizer.ggml.add_space_prefix", true);
  json norm_steps = json::array();
  if (prefix) norm_steps.push_back({{"type", "Prepend"}, {"prepend", "\xe2\x96\x81"}});
  norm_steps.push_back(
      {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xe2\x96\x81"}});
  json dec = json::array(
      {{{"type", "Replace"}, {"pattern", {{"String", "\xe2\x96\x81"}}}, {"content", " "}},
       {{"type", "ByteFallback"}},
       {{"type", "Fuse"}}});
  if (prefix) dec.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  json model = {{"type", "BPE"},
                {"vocab", vocab_object(tokens, g.path())},
                {"merges", mj},
                {"byte_fallback", true},
                {"fuse_unk", true}};
  if (unk >= 0 && unk < static_cast<int64_t>(tokens.size())) model["unk_token"] = tokens[unk];
  return {{"model", model},
          {"normalizer", {{"type", "Sequence"}, {"normalizers", norm_steps}}},
          {"pre_tokenizer", nullptr},
          {"decoder", {{"type", "Sequence"}, {"decoders", dec}}},
          {"added_tokens", added_tokens(tokens, types)},
          {"post_processor", nullptr}};
}

}  // namespace

json gguf_tokenizer_json(const GgufSet& g) {
  const std::string model = g.get_string_or("tokenizer.ggml.model", "");
  if (model.empty())
    fail("{}: has no tokenizer (tokenizer.ggml.model is missing); use a GGUF with its vocabulary",
         g.path());
  std::vector<std::string> tokens = g.get_strings("tokenizer.ggml.tokens");
  std::vector<int32_t> types = token_types(g, tokens.size());
  if (model == "gpt2") return bpe_json(g, tokens, types);
  if (model == "llama") return spm_json(g, tokens, types);
  fail("{}: tokenizer.ggml.model '{}' is not supported (supported: gpt2, llama)", g.path(), model);
}

GgufSpecialTokens gguf_special_tokens(const GgufSet& g) {
  GgufSpecialTokens s;
  const int64_t n = static_cast<int64_t>(g.get_strings("tokenizer.ggml.tokens").size());
  auto id = [&](const char* k) -> int32_t {
    if (!g.has(k)) return -1;
    int64_t v = g.get_int(k);
    if (v < 0 || v >= n) fail("{}: {} {} is outside the vocabulary of {}", g.path(), k, v, n);
    return static_cast<int32_t>(v);
  };
  s.bos = id("tokenizer.ggml.bos_token_id");
  s.eos = id("tokenizer.ggml.eos_token_id");
  const std::string model = g.get_string_or("tokenizer.ggml.model", "");
  const PreType* pre = find_pre(g.get_string_or("tokenizer.ggml.pre", "default"));
  const bool dflt_bos = model == "llama" || (model == "gpt2" && pre && pre->add_bos);
  s.add_bos = g.get_bool_or("tokenizer.ggml.add_bos_token", dflt_bos) && s.bos >= 0;
  s.add_eos = g.get_bool_or("tokenizer.ggml.add_eos_token", false) && s.eos >= 0;
  return s;
}

Tokenizer Tokenizer::load_gguf(const std::string& path) {
  auto g = GgufSet::open(path);
  Tokenizer tok = from_json(gguf_tokenizer_json(*g), path);
  GgufSpecialTokens s = gguf_special_tokens(*g);
  tok.bos_id_ = s.bos;
  tok.eos_id_ = s.eos;
  tok.prefix_.clear();
  tok.suffix_.clear();
  if (s.add_bos) tok.prefix_.push_back(s.bos);
  if (s.add_eos) tok.suffix_.push_back(s.eos);
  return tok;
}

bool gguf_chat_template(const std::string& path, std::string* source, std::string* bos,
                        std::string* eos) {
  auto g = GgufSet::open(path);
  if (!g->has("tokenizer.chat_template")) return false;
  *source = g->get_string("tokenizer.chat_template");
  const std::vector<std::string> tokens = g->has("tokenizer.ggml.tokens")
                                              ? g->get_strings("tokenizer.ggml.tokens")
                                              : std::vector<std::string>{};
  GgufSpecialTokens s = tokens.empty() ? GgufSpecialTokens{} : gguf_special_tokens(*g);
  *bos = s.bos >= 0 ? tokens[s.bos] : "";
  *eos = s.eos >= 0 ? tokens[s.eos] : "";
  return true;
}

// ---- export: HF tokenizer directory -> tokenizer.ggml.* ---------------------------------

namespace {

json read_json_file(const std::string& path) {
  try {
    return json::parse(read_file(path));
  } catch (const json::exception& e) {
    fail("{}: not valid JSON ({})", path, e.what());
  }
}

std::string token_content(const json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("content") && j["content"].is_string())
    return j["content"].get<std::string>();
  return "";
}

// The GGUF pre name of a byte-level pre-tokenizer; "" when GGUF has none for it.
std::string pre_name_of(const json& pre) {
  if (pre.is_object() && pre.value("type", "") == "ByteLevel" && pre.value("use_regex", true) &&
      !pre.value("add_prefix_space", false))
    return "gpt2";
  if (!pre.is_object() || pre.value("type", "") != "Sequence") return "";
  const json& steps = pre["pretokenizers"];
  if (!steps.is_array() || steps.size() != 2 || steps[0].value("type", "") != "Split" ||
      steps[1].value("type", "") != "ByteLevel" || steps[1].value("use_regex", true))
    return "";
  std::string regex = steps[0]["pattern"].value("Regex", "");
  if (regex == k_qwen2_regex) return "qwen2";
  if (regex == k_llama3_regex) return "llama-bpe";
  if (regex == k_gpt2_regex) return "gpt2";
  return "";
}

std::string merge_string(const json& m) {
  if (m.is_string()) return m.get<std::string>();
  if (m.is_array() && m.size() == 2) return m[0].get<std::string>() + " " + m[1].get<std::string>();
  fail("tokenizer.json: a merge must be \"a b\" or [\"a\", \"b\"]");
}

}  // namespace

void gguf_add_hf_tokenizer(GgufWriter& w, const std::string& dir) {
  namespace fs = std::filesystem;
  const std::string tj_path = (fs::path(dir) / "tokenizer.json").string();
  if (!file_exists(tj_path)) fail("{} not found; the GGUF needs the model's tokenizer", tj_path);
  const json tj = read_json_file(tj_path);
  const json& model = tj.at("model");
  if (model.value("type", "BPE") != "BPE")
    fail("{}: only BPE tokenizers can be written to GGUF", tj_path);
  // id -> token over the vocabulary and the added tokens.
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  auto put = [&](int64_t id, const std::string& t, int32_t type) {
    if (id < 0 || id > (1 << 24)) fail("{}: token id {} out of range", tj_path, id);
    if (static_cast<size_t>(id) >= tokens.size()) {
      tokens.resize(id + 1);
      types.resize(id + 1, UNUSED);
    }
    tokens[id] = t;
    types[id] = type;
  };
  const bool spm = model.value("byte_fallback", false);
  for (auto it = model.at("vocab").begin(); it != model.at("vocab").end(); ++it) {
    const std::string& t = it.key();
    const bool byte = spm && t.size() == 6 && t.rfind("<0x", 0) == 0 && t.back() == '>';
    put(it->get<int64_t>(), t, byte ? BYTE : NORMAL);
  }
  for (const auto& a : tj.value("added_tokens", json::array()))
    put(a.at("id").get<int64_t>(), a.at("content").get<std::string>(),
        a.value("special", false) ? CONTROL : USER_DEFINED);
  for (size_t i = 0; i < tokens.size(); ++i)
    if (types[i] == UNUSED && tokens[i].empty()) tokens[i] = "[PAD" + std::to_string(i) + "]";

  std::vector<std::string> merges;
  for (const auto& m : model.value("merges", json::array())) merges.push_back(merge_string(m));
  if (!spm) {
    const std::string pre = pre_name_of(tj.value("pre_tokenizer", json()));
    if (pre.empty())
      fail(
          "{}: this pre-tokenizer has no GGUF name (supported: GPT-2 ByteLevel, the qwen2 and "
          "llama-bpe regexes)",
          tj_path);
    w.set("tokenizer.ggml.model", GgufValue::str("gpt2"));
    w.set("tokenizer.ggml.pre", GgufValue::str(pre));
  } else {
    w.set("tokenizer.ggml.model", GgufValue::str("llama"));
  }
  w.set("tokenizer.ggml.tokens", GgufValue::strings(tokens));
  if (spm) {
    // Scores: a merged token ranks by its merge's position (earlier merges score higher).
    std::vector<float> scores(tokens.size(), 0.f);
    StringMap<int32_t> ids;
    for (size_t i = 0; i < tokens.size(); ++i) ids.emplace(tokens[i], int32_t(i));
    for (size_t r = 0; r < merges.size(); ++r) {
      const std::string& m = merges[r];
      size_t sp = m.find(' ');
      auto it = ids.find(m.substr(0, sp) + m.substr(sp + 1));
      if (it != ids.end() && scores[it->second] == 0.f)
        scores[it->second] = -static_cast<float>(r + 1);
    }
    auto chars = [](const std::string& t) {
      return std::count_if(t.begin(), t.end(), [](char ch) { return (ch & 0xc0) != 0x80; });
    };
    for (size_t i = 0; i < tokens.size(); ++i)
      if (types[i] == NORMAL && scores[i] == 0.f && chars(tokens[i]) > 1)
        scores[i] = -1e9f;  // a piece no merge produces: its merges rank last
    w.set("tokenizer.ggml.scores", GgufValue::f32s(scores));
  }
  w.set("tokenizer.ggml.token_type", GgufValue::i32s(types));
  if (!spm) w.set("tokenizer.ggml.merges", GgufValue::strings(merges));

  const std::string cfg_path = (fs::path(dir) / "tokenizer_config.json").string();
  json cfg = file_exists(cfg_path) ? read_json_file(cfg_path) : json::object();
  auto id_of = [&](const char* key) -> int64_t {
    std::string t = cfg.contains(key) ? token_content(cfg[key]) : "";
    if (t.empty()) return -1;
    for (size_t i = 0; i < tokens.size(); ++i)
      if (tokens[i] == t) return static_cast<int64_t>(i);
    return -1;
  };
  for (auto [key, gkey] : {std::pair{"bos_token", "tokenizer.ggml.bos_token_id"},
                           {"eos_token", "tokenizer.ggml.eos_token_id"},
                           {"pad_token", "tokenizer.ggml.padding_token_id"},
                           {"unk_token", "tokenizer.ggml.unknown_token_id"}})
    if (int64_t id = id_of(key); id >= 0) w.set(gkey, GgufValue::u32(static_cast<uint32_t>(id)));
  // What Tokenizer::load would add: tokenizer_config's flags, else the post-processor's.
  const Tokenizer tok = Tokenizer::load(dir);
  w.set("tokenizer.ggml.add_bos_token",
        GgufValue::boolean(!tok.prefix_ids().empty() && tok.prefix_ids()[0] == tok.bos_id()));
  w.set("tokenizer.ggml.add_eos_token",
        GgufValue::boolean(!tok.suffix_ids().empty() && tok.suffix_ids()[0] == tok.eos_id()));
  if (spm) w.set("tokenizer.ggml.add_space_prefix", GgufValue::boolean(true));

  std::string chat;
  if (file_exists((fs::path(dir) / "chat_template.jinja").string()))
    chat = read_file((fs::path(dir) / "chat_template.jinja").string());
  else if (cfg.contains("chat_template") && cfg["chat_template"].is_string())
    chat = cfg["chat_template"].get<std::string>();
  if (!chat.empty()) w.set("tokenizer.chat_template", GgufValue::str(chat));
}

}  // namespace ft
