// ft tokenize: encode text (or a chat request) with a model's tokenizer and print the ids.
// Hidden flags serve the parity tests (--jsonl batch mode) and the benchmark (--bench-file).
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/error.h"
#include "base/timer.h"
#include "cli/commands.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"
#if __has_include("tokenizer/chat_template.h")
#include "tokenizer/chat_template.h"
#define FT_HAVE_CHAT_TEMPLATE 1
#endif

namespace ft::cli {

namespace {

struct TokenizeArgs {
  std::string model, text, file, chat, jsonl, bench_file;
  bool add_special = false, json = false, verbose = false;
};

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("cannot read {}; check the path", path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

template <typename Json>
std::string dump(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

void print_ids(const Tokenizer& tok, const std::vector<int32_t>& ids, const TokenizeArgs& a,
               nlohmann::ordered_json extra = nlohmann::ordered_json::object()) {
  if (a.json) {
    extra["ids"] = ids;
    if (a.verbose) {
      auto& pieces = extra["pieces"] = nlohmann::ordered_json::array();
      for (int32_t id : ids) pieces.push_back(std::string(tok.piece(id)));
    }
    std::printf("%s\n", dump(extra).c_str());
    return;
  }
  if (a.verbose) {
    for (int32_t id : ids) std::printf("%d\t%s\n", id, dump(nlohmann::json(std::string(tok.piece(id)))).c_str());
    return;
  }
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) line += (i ? " " : "") + std::to_string(ids[i]);
  std::printf("%s\n", line.c_str());
}

// One JSON request per line: {"encode": text, "add_special": b} -> {"ids": [...]},
// {"decode": [ids], "skip_special": b} -> {"text": s}, {"stream": [ids], "skip_special": b}
// -> {"text": s, "valid_deltas": b} (through the incremental detokenizer).
void run_jsonl(const Tokenizer& tok, const std::string& path) {
  std::ifstream file;
  std::istream* in = &std::cin;
  if (path != "-") {
    file.open(path);
    if (!file) fail("cannot read {}; check the path", path);
    in = &file;
  }
  std::string line;
  while (std::getline(*in, line)) {
    if (line.empty()) continue;
    nlohmann::json req = nlohmann::json::parse(line), res;
    if (req.contains("encode")) {
      res["ids"] = tok.encode(req["encode"].get<std::string>(), req.value("add_special", false));
    } else if (req.contains("decode")) {
      auto ids = req["decode"].get<std::vector<int32_t>>();
      res["text"] = tok.decode(ids, req.value("skip_special", false));
    } else if (req.contains("stream")) {
      Detokenizer detok(tok, req.value("skip_special", false));
      std::string text;
      bool valid = true;
      for (int32_t id : req["stream"].get<std::vector<int32_t>>()) {
        std::string delta = detok.feed(id);
        valid &= utf8::is_valid(delta);
        text += delta;
      }
      text += detok.flush();
      res["text"] = text;
      res["valid_deltas"] = valid;
    } else {
      fail("--jsonl: each line needs \"encode\", \"decode\" or \"stream\"");
    }
    std::printf("%s\n", dump(res).c_str());
  }
  std::fflush(stdout);
}

// Single-thread encode throughput over a file, encoded in chunks of at most 4 KiB cut after a
// newline (bench/tokenizer_bench.mjs cuts the same chunks for the reference).
void run_bench(const Tokenizer& tok, const std::string& path) {
  constexpr size_t kChunk = 4 * 1024;
  std::string data = read_file(path);
  std::vector<std::string_view> chunks;
  for (size_t b = 0; b < data.size();) {
    size_t e = std::min(data.size(), b + kChunk);
    if (e < data.size()) {
      size_t nl = data.rfind('\n', e - 1);
      if (nl != std::string::npos && nl >= b) e = nl + 1;
    }
    chunks.push_back(std::string_view(data).substr(b, e - b));
    b = e;
  }
  std::vector<int32_t> ids;
  size_t n_tokens = 0;
  Timer t;
  for (auto c : chunks) {
    ids.clear();
    tok.encode_into(c, false, ids);
    n_tokens += ids.size();
  }
  double s = t.seconds();
  std::printf("{\"bytes\": %zu, \"chunks\": %zu, \"tokens\": %zu, \"seconds\": %.3f, "
              "\"mb_per_s\": %.2f}\n",
              data.size(), chunks.size(), n_tokens, s, data.size() / 1e6 / s);
}

void run_chat(const std::string& model, const std::string& request_path, const Tokenizer& tok,
              const TokenizeArgs& a) {
#ifdef FT_HAVE_CHAT_TEMPLATE
  nlohmann::ordered_json request;  // ordered: templates print tool schemas in request order
  try {
    request = nlohmann::ordered_json::parse(read_file(request_path));
  } catch (const nlohmann::json::exception& e) {
    fail("{}: malformed JSON request ({})", request_path, e.what());
  }
  std::string prompt = ChatTemplate::load(model).render(request);
  // transformers' apply_chat_template(tokenize=True) encodes with add_special_tokens=False:
  // the template itself writes any BOS.
  nlohmann::ordered_json out;
  out["prompt"] = prompt;
  print_ids(tok, tok.encode(prompt, false), {.json = true, .verbose = a.verbose}, out);
#else
  fail("--chat needs the chat-template engine, which this build does not include");
#endif
}

void run_tokenize(const TokenizeArgs& a) {
  Tokenizer tok = Tokenizer::load(a.model);
  if (!a.jsonl.empty()) return run_jsonl(tok, a.jsonl);
  if (!a.bench_file.empty()) return run_bench(tok, a.bench_file);
  if (!a.chat.empty()) return run_chat(a.model, a.chat, tok, a);
  if (a.file.empty() && a.text.empty()) fail("give the text to tokenize, or --file F");
  std::string text = a.file.empty() ? a.text : read_file(a.file);
  print_ids(tok, tok.encode(text, a.add_special), a);
}

}  // namespace

void add_tokenize_command(CLI::App& app) {
  auto args = std::make_shared<TokenizeArgs>();
  auto* cmd = app.add_subcommand("tokenize", "Tokenize text with a model's tokenizer");
  cmd->add_option("--model", args->model, "Model directory holding tokenizer.json")->required();
  cmd->add_option("text", args->text, "Text to tokenize");
  cmd->add_option("--file", args->file, "Read the text from a file");
  cmd->add_option("--chat", args->chat, "Render and tokenize an OpenAI-style chat request JSON");
  cmd->add_flag("--add-special", args->add_special, "Add BOS/EOS as the tokenizer config says");
  cmd->add_flag("--json", args->json, "Print {\"ids\": [...]}");
  cmd->add_flag("--verbose", args->verbose, "Also print each token's piece");
  cmd->add_option("--jsonl", args->jsonl, "Batch mode: JSON requests per line (- = stdin)")
      ->group("");
  cmd->add_option("--bench-file", args->bench_file, "Print encode throughput over a file")
      ->group("");
  cmd->callback([args] { run_tokenize(*args); });
}

}  // namespace ft::cli
