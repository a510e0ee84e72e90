// ft run: generate a continuation of a text prompt (or a chat message, or token ids) and stream
// the text to stdout.
#include <cstdio>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "engine/generate.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/generation_config.h"

namespace ft::cli {

namespace {
struct RunOptions {
  std::string model, prompt, prompt_ids, system;
  bool chat = false;
  int64_t n = 256;
  float temperature = 0.f, top_p = 1.f, min_p = 0.f;
  int64_t top_k = 0;
  uint64_t seed = 0;
  bool json = false, ignore_eos = false;
  int threads = 0;
};

void run_run(RunOptions o) {
  if (o.model.empty()) o.model = default_model_dir();
  if (o.prompt.empty() == o.prompt_ids.empty())
    fail("give a text prompt or --prompt-ids (exactly one)");
  if (o.chat && o.prompt.empty()) fail("--chat takes a text prompt");
  auto model = load_model(o.model);
  const auto& c = model->config();
  std::unique_ptr<Tokenizer> tok;
  std::vector<int32_t> ids;
  if (!o.prompt.empty()) {
    tok = std::make_unique<Tokenizer>(Tokenizer::load(o.model));
    if (o.chat) {
      nlohmann::ordered_json req = {{"messages", nlohmann::ordered_json::array()}};
      if (!o.system.empty()) req["messages"].push_back({{"role", "system"}, {"content", o.system}});
      req["messages"].push_back({{"role", "user"}, {"content", o.prompt}});
      ids = tok->encode(ChatTemplate::load(o.model).render(req), false);
    } else {
      ids = tok->encode(o.prompt, true);
    }
  } else {
    ids = parse_ids(o.prompt_ids, "--prompt-ids");
  }
  check_ids(ids, c.vocab_size, "prompt");
  if (o.n <= 0) fail("-n must be positive");
  ThreadPool pool(o.threads);
  Transformer tf(*model, pool);
  GenerateParams p;
  p.max_new_tokens = o.n;
  p.sampling = {.temperature = o.temperature, .top_k = o.top_k, .top_p = o.top_p,
                .min_p = o.min_p, .seed = o.seed};
  if (!o.ignore_eos) {
    p.stop_ids = c.eos_token_ids;
    if (tok)
      for (int32_t id : stop_token_ids(GenerationConfig::load(o.model), *tok)) p.stop_ids.push_back(id);
  }
  std::unique_ptr<Detokenizer> detok;
  if (tok && !o.json) detok = std::make_unique<Detokenizer>(*tok, true);
  GenerateStats st;
  auto out = generate(tf, ids, p, &st, [&](int32_t id) {
    if (detok) {
      std::string s = detok->feed(id);
      std::fwrite(s.data(), 1, s.size(), stdout);
      std::fflush(stdout);
    }
    return true;
  });
  if (o.json) {
    nlohmann::json j = {{"ids", out}};
    if (tok) j["text"] = tok->decode(out, true);
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  if (detok) {
    std::string s = detok->flush();
    std::printf("%s\n", s.c_str());
  } else {
    for (size_t i = 0; i < out.size(); ++i) std::printf("%s%d", i ? " " : "", out[i]);
    std::printf("\n");
  }
  std::fprintf(stderr, "prefill %lld tokens %.1f tok/s, decode %lld tokens %.1f tok/s\n",
               static_cast<long long>(st.prompt_tokens), st.prompt_tokens / st.prefill_s,
               static_cast<long long>(st.new_tokens),
               st.new_tokens > 1 ? (st.new_tokens - 1) / st.decode_s : 0.0);
}
}  // namespace

void add_run_command(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  auto* cmd = app.add_subcommand("run", "Generate a continuation of a prompt");
  cmd->add_option("prompt", o->prompt, "Text prompt (a user message with --chat)");
  cmd->add_option("--model", o->model, "Model directory (default: the embedded demo model)");
  cmd->add_option("--prompt-ids", o->prompt_ids, "Prompt as comma-separated token ids");
  cmd->add_flag("--chat", o->chat, "Treat the prompt as a user message (chat template)");
  cmd->add_option("--system", o->system, "System message (with --chat)");
  cmd->add_option("-n,--max-tokens", o->n, "Most tokens to generate")->capture_default_str();
  cmd->add_option("--temperature", o->temperature, "0 = greedy")->check(CLI::Range(0.f, 100.f));
  cmd->add_option("--top-k", o->top_k, "Keep the k most likely tokens (0: off)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-p", o->top_p, "Nucleus sampling mass")->check(CLI::Range(0.f, 1.f));
  cmd->add_option("--min-p", o->min_p, "Drop tokens below min-p x the top probability")->check(CLI::Range(0.f, 1.f));
  cmd->add_option("--seed", o->seed, "Sampling seed");
  cmd->add_flag("--ignore-eos", o->ignore_eos, "Do not stop at end-of-sequence tokens");
  cmd->add_flag("--json", o->json, "Print {\"ids\": [...], \"text\": ...}");
  cmd->add_option("--threads", o->threads, "CPU threads (0: one per core)");
  cmd->callback([o] { run_run(*o); });
}

}  // namespace ft::cli
