// ft checkpoint: any model ft loads (HF directory, quantized HF, .gguf) -> a fast-load
// checkpoint directory (model/ft_checkpoint.h) that every --model flag then accepts.
#include <cstdio>
#include <filesystem>

#include "base/error.h"
#include "base/timer.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "engine/progress.h"
#include "io/gguf.h"
#include "model/ft_checkpoint.h"
#include "tokenizer/gguf_hf_files.h"

namespace ft::cli {

namespace {
struct CheckpointOptions {
  std::string model, out, type;
};

void run_checkpoint(const CheckpointOptions& o) {
  namespace fs = std::filesystem;
  if (o.out.empty()) fail("--out is required");
  if (fs::exists(o.out) && !fs::is_directory(o.out))
    fail("--out {}: exists and is not a directory", o.out);
  if (fs::exists(o.model) && fs::exists(o.out) && fs::equivalent(o.model, o.out))
    fail("--out {}: would overwrite the source", o.out);
  Timer t;
  auto model = load_model(o.model);
  std::unique_ptr<ProgressBar> bar;
  write_ft_checkpoint(*model, o.model, o.out,
                      {.type = o.type, .progress = [&](size_t done, size_t total) {
                         if (!bar) bar = std::make_unique<ProgressBar>("ft checkpoint", total);
                         bar->update(done);
                       }});
  bar.reset();
  if (is_gguf_path(o.model)) write_gguf_tokenizer_as_hf(o.model, o.out);
  std::fprintf(stderr, "ft checkpoint: %s -> %s (%.1f s)\n", o.model.c_str(), o.out.c_str(),
               t.seconds());
  std::printf("%s\n", o.out.c_str());
}
}  // namespace

void add_checkpoint_command(CLI::App& app) {
  auto o = std::make_shared<CheckpointOptions>();
  auto* cmd = app.add_subcommand(
      "checkpoint", "Write a fast-load checkpoint (engine layout, 4 KiB aligned, O_DIRECT reads)");
  cmd->add_option("--model", o->model, "Source: HF checkpoint directory, .gguf or checkpoint")
      ->required();
  cmd->add_option("--out", o->out, "Output directory")->required();
  cmd->add_option("--type", o->type,
                  "Re-quantize matrices: q8_0, q4_k, ..., iq4_nl, mxfp4, nvfp4, fp8, f16, bf16, "
                  "f32 (default: keep each as loaded)");
  cmd->callback([o] { run_checkpoint(*o); });
}

}  // namespace ft::cli
