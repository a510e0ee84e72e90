// ft run: generate a continuation of a prompt (token ids for now) and print it.
#include <cstdio>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "engine/generate.h"

namespace ft::cli {

namespace {
struct RunOptions {
  std::string model, prompt_ids;
  int64_t n = 16;
  float temperature = 0.f, top_p = 1.f, min_p = 0.f;
  int64_t top_k = 0;
  uint64_t seed = 0;
  bool json = false, ignore_eos = false;
  int threads = 0;
};

void run_run(const RunOptions& o) {
  auto model = load_model(o.model);
  const auto& c = model->config();
  auto ids = parse_ids(o.prompt_ids, "--prompt-ids");
  check_ids(ids, c.vocab_size, "--prompt-ids");
  if (o.n <= 0) fail("-n must be positive");
  ThreadPool pool(o.threads);
  Transformer tf(*model, pool);
  GenerateParams p;
  p.max_new_tokens = o.n;
  p.sampling = {.temperature = o.temperature, .top_k = o.top_k, .top_p = o.top_p,
                .min_p = o.min_p, .seed = o.seed};
  if (!o.ignore_eos) p.stop_ids = c.eos_token_ids;
  GenerateStats st;
  auto out = generate(tf, ids, p, &st);
  if (o.json) {
    std::printf("%s\n", nlohmann::json{{"ids", out}}.dump().c_str());
  } else {
    for (size_t i = 0; i < out.size(); ++i) std::printf("%s%d", i ? " " : "", out[i]);
    std::printf("\n");
    std::fprintf(stderr, "prefill %lld tokens %.1f tok/s, decode %lld tokens %.1f tok/s\n",
                 static_cast<long long>(st.prompt_tokens), st.prompt_tokens / st.prefill_s,
                 static_cast<long long>(st.new_tokens),
                 st.new_tokens > 1 ? (st.new_tokens - 1) / st.decode_s : 0.0);
  }
}
}  // namespace

void add_run_command(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  auto* cmd = app.add_subcommand("run", "Generate a continuation of a prompt");
  cmd->add_option("--model", o->model, "Model directory (HF config.json + safetensors)")->required();
  cmd->add_option("--prompt-ids", o->prompt_ids, "Prompt as comma-separated token ids")->required();
  cmd->add_option("-n,--max-tokens", o->n, "Tokens to generate");
  cmd->add_option("--temperature", o->temperature, "0 = greedy")->check(CLI::Range(0.f, 100.f));
  cmd->add_option("--top-k", o->top_k, "Keep the k most likely tokens (0: off)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-p", o->top_p, "Nucleus sampling mass")->check(CLI::Range(0.f, 1.f));
  cmd->add_option("--min-p", o->min_p, "Drop tokens below min-p x the top probability")->check(CLI::Range(0.f, 1.f));
  cmd->add_option("--seed", o->seed, "Sampling seed");
  cmd->add_flag("--ignore-eos", o->ignore_eos, "Do not stop at end-of-sequence tokens");
  cmd->add_flag("--json", o->json, "Print {\"ids\": [...]}");
  cmd->add_option("--threads", o->threads, "CPU threads (0: one per core)");
  cmd->callback([o] { run_run(*o); });
}

}  // namespace ft::cli
