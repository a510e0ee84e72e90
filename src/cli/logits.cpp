// ft logits: prints the model's logits for a list of ids as JSON (parity checks, debugging).
#include <cstdio>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "model/transformer.h"

namespace ft::cli {

namespace {
struct LogitsOptions {
  std::string model, ids, positions = "last";
  int threads = 0;
};

void run_logits(const LogitsOptions& o) {
  auto model = load_model(o.model);
  const auto& c = model->config();
  auto ids = parse_ids(o.ids, "--ids");
  check_ids(ids, c.vocab_size, "--ids");
  const bool all = o.positions == "all";
  ThreadPool pool(o.threads);
  Transformer tf(*model, pool);
  KVCache kv(c, static_cast<int64_t>(ids.size()));
  const int64_t rows = all ? static_cast<int64_t>(ids.size()) : 1;
  std::vector<float> logits(rows * c.vocab_size);
  tf.forward(ids.data(), static_cast<int64_t>(ids.size()), 0, kv, logits.data(), all);
  nlohmann::json out = {{"n_vocab", c.vocab_size}, {"logits", nlohmann::json::array()}};
  for (int64_t r = 0; r < rows; ++r)
    out["logits"].push_back(std::vector<float>(logits.begin() + r * c.vocab_size,
                                               logits.begin() + (r + 1) * c.vocab_size));
  std::printf("%s\n", out.dump().c_str());
}
}  // namespace

void add_logits_command(CLI::App& app) {
  auto o = std::make_shared<LogitsOptions>();
  auto* cmd = app.add_subcommand("logits", "Print the logits of a token-id prompt as JSON");
  cmd->add_option("--model", o->model, "Model directory (HF config.json + safetensors)")->required();
  cmd->add_option("--ids", o->ids, "Comma-separated token ids, e.g. 1,2,3")->required();
  cmd->add_option("--positions", o->positions, "Rows to print: last or all")
      ->check(CLI::IsMember({"last", "all"}));
  cmd->add_option("--threads", o->threads, "CPU threads (0: one per core)");
  cmd->callback([o] { run_logits(*o); });
}

}  // namespace ft::cli
