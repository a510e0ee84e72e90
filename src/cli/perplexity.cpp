// ft perplexity: mean next-token NLL of a model over a text file, in windows of --ctx tokens.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/error.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "model/transformer.h"
#include "tokenizer/tokenizer.h"

namespace ft::cli {

namespace {
struct PerplexityOptions {
  std::string model, file;
  int64_t ctx = 512;
  int threads = 0;
};

constexpr int64_t kChunk = 64;  // tokens per forward pass: bounds the logits buffer

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("cannot read {}; check the --file path", path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// -log softmax(row)[target], in double.
double token_nll(const float* row, int64_t vocab, int32_t target) {
  float mx = row[0];
  for (int64_t i = 1; i < vocab; ++i) mx = std::max(mx, row[i]);
  double sum = 0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(row[i] - mx));
  return std::log(sum) - static_cast<double>(row[target] - mx);
}

// Each window of up to ctx tokens starts from an empty cache; its tokens 1..n-1 are scored.
void run_perplexity(const PerplexityOptions& o) {
  if (o.ctx < 2) fail("--ctx must be at least 2 (got {})", o.ctx);
  const std::string text = read_text(o.file);
  if (text.find_first_not_of(" \t\r\n") == std::string::npos)
    fail("{}: no text to score (the file is empty)", o.file);
  auto model = load_model(o.model);
  const auto& c = model->config();
  const auto ids = Tokenizer::load(o.model).encode(text, /*add_special=*/false);
  if (ids.size() < 2) fail("{}: needs at least 2 tokens, has {}", o.file, ids.size());
  check_ids(ids, c.vocab_size, "--file");

  ThreadPool pool(o.threads);
  Transformer tf(*model, pool, kChunk);
  std::vector<float> logits(kChunk * c.vocab_size);  // [kChunk, vocab]
  const int64_t n_ids = static_cast<int64_t>(ids.size());
  double total = 0;
  int64_t scored = 0;
  for (int64_t w0 = 0; w0 + 1 < n_ids; w0 += o.ctx) {
    const int64_t n = std::min(o.ctx, n_ids - w0);
    KVCache kv(c, o.ctx);
    for (int64_t p = 0; p < n; p += kChunk) {
      const int64_t m = std::min(kChunk, n - p);
      tf.forward(ids.data() + w0 + p, m, p, kv, logits.data(), /*all_logits=*/true);
      for (int64_t t = 0; t < m && p + t + 1 < n; ++t, ++scored)
        total += token_nll(logits.data() + t * c.vocab_size, c.vocab_size, ids[w0 + p + t + 1]);
    }
  }
  const double nll = total / static_cast<double>(scored);
  nlohmann::ordered_json out = {{"tokens", scored}, {"nll", nll}, {"perplexity", std::exp(nll)}};
  std::printf("%s\n", out.dump().c_str());
}
}  // namespace

void add_perplexity_command(CLI::App& app) {
  auto o = std::make_shared<PerplexityOptions>();
  auto* cmd = app.add_subcommand("perplexity", "Perplexity of a model on a text file");
  cmd->add_option("--model", o->model, "Model directory (HF config.json + safetensors + tokenizer)")
      ->required();
  cmd->add_option("--file", o->file, "UTF-8 text to score (encoded without BOS/EOS)")->required();
  cmd->add_option("--ctx", o->ctx,
                  "Window length in tokens; each window starts from an empty cache");
  cmd->add_option("--threads", o->threads, "CPU threads (0: one per core)");
  cmd->callback([o] { run_perplexity(*o); });
}

}  // namespace ft::cli
