// ft perplexity: mean next-token NLL of a model over a text file, in windows of --ctx tokens;
// with --kl-divergence-base, KL(base || model) and top-1 agreement against a base model (or a
// base log-prob file written by --save-logits), as llama.cpp's perplexity tool does.
#include <sys/stat.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/error.h"
#include "base/half.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "io/gguf.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"
#include "model/kl_divergence.h"
#include "model/transformer.h"
#include "tokenizer/tokenizer.h"

namespace ft::cli {

namespace {
struct PerplexityOptions {
  std::string model, file, kl_base, save_logits;
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

// Calls fn(log-prob rows, target id) for every scored position, one row per model (the models
// run in lockstep): each window of up to ctx tokens starts from an empty cache and its tokens
// 1..n-1 are scored.
void for_each_position(const std::vector<const Model*>& models, ThreadPool& pool,
                       const std::vector<int32_t>& ids, int64_t ctx,
                       const std::function<void(const float* const*, int32_t)>& fn) {
  const auto& c = models[0]->config();
  const int64_t V = c.vocab_size;
  const size_t nm = models.size();
  std::vector<std::unique_ptr<Transformer>> tf;
  for (const Model* m : models) tf.push_back(std::make_unique<Transformer>(*m, pool, kChunk));
  std::vector<std::vector<float>> logits(nm, std::vector<float>(kChunk * V)),
      logp(nm, std::vector<float>(V));
  std::vector<const float*> rows(nm);
  const int64_t n_ids = static_cast<int64_t>(ids.size());
  for (int64_t w0 = 0; w0 + 1 < n_ids; w0 += ctx) {
    const int64_t n = std::min(ctx, n_ids - w0);
    std::vector<KVCache> kv;
    for (const Model* m : models) kv.emplace_back(m->config(), ctx);
    for (int64_t p = 0; p < n; p += kChunk) {
      const int64_t m = std::min(kChunk, n - p);
      for (size_t k = 0; k < nm; ++k)
        tf[k]->forward(ids.data() + w0 + p, m, p, kv[k], logits[k].data(), /*all_logits=*/true);
      for (int64_t t = 0; t < m && p + t + 1 < n; ++t) {
        for (size_t k = 0; k < nm; ++k) {
          log_softmax(logits[k].data() + t * V, V, logp[k].data());
          rows[k] = logp[k].data();
        }
        fn(rows.data(), ids[w0 + p + t + 1]);
      }
    }
  }
}

// Base log-probs for KL: either a second model run position by position, or rows of a file
// written by --save-logits (F16 log-probs; the tokens must be the same).
class KlBase {
 public:
  KlBase(const PerplexityOptions& o, const std::vector<int32_t>& ids, int64_t vocab) {
    struct stat st {};
    const bool dir = ::stat(o.kl_base.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
    if (dir || is_gguf_path(o.kl_base)) {
      model_ = load_model(o.kl_base);
      if (model_->config().vocab_size != vocab)
        fail("--kl-divergence-base {}: vocabulary of {} tokens, but the model has {}", o.kl_base,
             model_->config().vocab_size, vocab);
      return;
    }
    file_ = std::make_unique<SafetensorsSet>(SafetensorsSet::open_file(o.kl_base));
    const TensorView& tok = file_->get("tokens");
    logp_ = file_->get("logprobs");
    if (tok.dtype != DType::I32 || logp_.dtype != DType::F16 || logp_.ndim != 2 ||
        logp_.shape[1] != vocab)
      fail(
          "{}: not a base log-prob file for this model (want tokens I32 and logprobs F16 "
          "[n, {}]; write one with --save-logits)",
          o.kl_base, vocab);
    if (tok.numel() != static_cast<int64_t>(ids.size()) ||
        !std::equal(ids.begin(), ids.end(), tok.as<int32_t>()))
      fail("{}: its tokens differ from --file's ({} vs {}): same text and tokenizer needed",
           o.kl_base, tok.numel(), ids.size());
    auto it = file_->find("ctx");
    if (!it || it->dtype != DType::I64 || *it->as<int64_t>() != o.ctx)
      fail("{}: was written with a different --ctx", o.kl_base);
  }
  Model* model() { return model_.get(); }
  // Row i of the file as f32 log-probs.
  const float* row(int64_t i, std::vector<float>& buf) const {
    FT_CHECK(i < logp_.shape[0], "base row {} of {}", i, logp_.shape[0]);
    const uint16_t* h = logp_.as<uint16_t>() + i * logp_.shape[1];
    buf.resize(logp_.shape[1]);
    for (int64_t j = 0; j < logp_.shape[1]; ++j) buf[j] = f16_to_f32(h[j]);
    return buf.data();
  }

 private:
  std::unique_ptr<Model> model_;
  std::unique_ptr<SafetensorsSet> file_;
  TensorView logp_;
};

void run_perplexity(const PerplexityOptions& o) {
  if (o.ctx < 2) fail("--ctx must be at least 2 (got {})", o.ctx);
  const std::string text = read_text(o.file);
  if (text.find_first_not_of(" \t\r\n") == std::string::npos)
    fail("{}: no text to score (the file is empty)", o.file);
  auto model = load_model(o.model);
  const auto& c = model->config();
  const int64_t V = c.vocab_size;
  const auto ids = Tokenizer::load(o.model).encode(text, /*add_special=*/false);
  if (ids.size() < 2) fail("{}: needs at least 2 tokens, has {}", o.file, ids.size());
  check_ids(ids, V, "--file");

  ThreadPool pool(o.threads);
  std::unique_ptr<KlBase> base;
  std::vector<const Model*> models{model.get()};
  if (!o.kl_base.empty()) {
    base = std::make_unique<KlBase>(o, ids, V);
    if (base->model()) models.push_back(base->model());
  }
  std::vector<uint16_t> saved;  // --save-logits: F16 log-probs [scored, V]
  double total = 0, base_total = 0;
  int64_t scored = 0;
  KlStats kl;
  std::vector<float> buf;
  for_each_position(models, pool, ids, o.ctx, [&](const float* const* lps, int32_t target) {
    const float* lp = lps[0];
    total -= lp[target];
    if (!o.save_logits.empty())
      for (int64_t j = 0; j < V; ++j) saved.push_back(f32_to_f16(lp[j]));
    if (base) {
      const float* b = base->model() ? lps[1] : base->row(scored, buf);
      base_total -= b[target];
      kl.add(b, lp, V);
    }
    ++scored;
  });
  const double nll = total / static_cast<double>(scored);
  nlohmann::ordered_json out = {{"tokens", scored}, {"nll", nll}, {"perplexity", std::exp(nll)}};
  if (base) {
    const double bnll = base_total / static_cast<double>(scored);
    out["kl_divergence"] = {{"base", o.kl_base},
                            {"base_perplexity", std::exp(bnll)},
                            {"mean", kl.mean()},
                            {"median", kl.quantile(0.5)},
                            {"p99", kl.quantile(0.99)},
                            {"max", kl.max()},
                            {"top1_agreement", kl.top1_agreement()}};
  }
  if (!o.save_logits.empty()) {
    const int64_t n_ids = static_cast<int64_t>(ids.size());
    TensorView tok{.dtype = DType::I32,
                   .ndim = 1,
                   .shape = {n_ids, 1, 1, 1},
                   .data = ids.data(),
                   .name = "tokens"};
    TensorView lp{.dtype = DType::F16,
                  .ndim = 2,
                  .shape = {scored, V, 1, 1},
                  .data = saved.data(),
                  .name = "logprobs"};
    TensorView cx{
        .dtype = DType::I64, .ndim = 1, .shape = {1, 1, 1, 1}, .data = &o.ctx, .name = "ctx"};
    write_safetensors(o.save_logits, {tok, lp, cx}, {{"format", "ft-logprobs"}});
    out["saved_logits"] = o.save_logits;
  }
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
  cmd->add_option("--kl-divergence-base", o->kl_base,
                  "Base model (directory or .gguf) or a --save-logits file: report KL(base || "
                  "model) per position (mean, median, p99, max) and top-1 agreement");
  cmd->add_option("--save-logits", o->save_logits,
                  "Write the model's log-probs (F16) to this file, for a later "
                  "--kl-divergence-base");
  cmd->add_option("--threads", o->threads, "CPU threads (0: one per core)");
  cmd->callback([o] { run_perplexity(*o); });
}

}  // namespace ft::cli
