// ft quantize: a Hugging Face checkpoint directory or a GGUF file -> a GGUF file whose matrices
// are in the chosen type (norms and routers stay f32), with the tokenizer and chat template.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "base/error.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "io/gguf.h"
#include "io/gguf_writer.h"
#include "model/ft_checkpoint.h"
#include "model/gguf_export.h"
#include "tokenizer/gguf_hf_files.h"
#include "quant/quant.h"
#include "tokenizer/gguf_vocab.h"

namespace ft::cli {

namespace {

struct QuantizeOptions {
  std::string in, out, type = "q8_0", out_format = "gguf";
  int split = 1;
};

// "q8_0", "Q4_K", "f16", "bf16", "f32", "source" -> ggml type id (nullopt: keep each tensor's).
std::optional<uint32_t> parse_type(const std::string& s) {
  if (s == "source") return std::nullopt;
  quant::QuantType t = quant::parse(s);
  const uint32_t id = static_cast<uint32_t>(t);
  if (ggml_type_info(id).block_bytes == 0)
    fail("--type {}: not a GGUF type (use a GGUF quant type, f16, bf16, f32 or source)", s);
  return id;
}

// Keys a GGUF input carries over: its tokenizer, chat template and general.* descriptions.
void copy_gguf_metadata(GgufWriter& w, const GgufSet& in) {
  for (const auto& [k, v] : in.metadata()) {
    const bool tok = k.rfind("tokenizer.", 0) == 0;
    const bool general = k.rfind("general.", 0) == 0 && k != "general.architecture" &&
                         k != "general.alignment" && k != "general.quantization_version" &&
                         k != "general.file_type";
    if (tok || general) w.set(k, v);
  }
}

class Progress {
 public:
  void operator()(size_t done, size_t total) {
    const auto now = std::chrono::steady_clock::now();
    if (done < total && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    const int width = 40;
    const double f = total ? static_cast<double>(done) / static_cast<double>(total) : 1.0;
    const int fill = static_cast<int>(f * width);
    std::fprintf(stderr, "\r[%.*s%*s] %5.1f%%  %.1f / %.1f MiB", fill,
                 "========================================", width - fill, "", 100.0 * f,
                 static_cast<double>(done) / (1 << 20), static_cast<double>(total) / (1 << 20));
    if (done >= total) std::fputc('\n', stderr);
    std::fflush(stderr);
  }

 private:
  std::chrono::steady_clock::time_point last_{};
};

// --out-format ftc: a fast-load checkpoint directory (model/ft_checkpoint.h) in the chosen type.
void run_quantize_ftc(const QuantizeOptions& o) {
  namespace fs = std::filesystem;
  if (fs::exists(o.out) && !fs::is_directory(o.out))
    fail("{}: --out-format ftc writes a directory, and this is a file", o.out);
  if (fs::exists(o.in) && fs::exists(o.out) && fs::equivalent(o.in, o.out))
    fail("{}: the output would overwrite the input", o.out);
  auto model = load_model(o.in);
  Progress progress;
  write_ft_checkpoint(*model, o.in, o.out,
                      {.type = o.type == "source" ? std::string() : o.type,
                       .progress = [&](size_t d, size_t t) { progress(d, t); }});
  if (is_gguf_path(o.in)) write_gguf_tokenizer_as_hf(o.in, o.out);
  std::fprintf(stderr, "ft quantize: %s -> %s (fast-load checkpoint, %s)\n", o.in.c_str(),
               o.out.c_str(), o.type.c_str());
  std::printf("%s\n", o.out.c_str());
}

void run_quantize(const QuantizeOptions& o) {
  namespace fs = std::filesystem;
  if (o.out_format == "ftc") return run_quantize_ftc(o);
  const GgufMix mix = gguf_mix_parse(o.type);
  const std::optional<uint32_t> type =
      mix != GgufMix::NONE ? std::optional<uint32_t>(gguf_mix_base(mix)) : parse_type(o.type);
  if (o.split < 1) fail("--split must be at least 1");
  if (!is_gguf_path(o.out))
    fail("{}: the output must be a .gguf file (or a directory with --out-format ftc)", o.out);
  if (fs::exists(o.in) && fs::exists(o.out) && fs::equivalent(o.in, o.out))
    fail("{}: the output would overwrite the input", o.out);
  auto model = load_model(o.in);
  GgufWriter w;
  GgufExportOptions eo{.type = type,
                       .name = fs::path(o.in).filename().replace_extension().string(),
                       .mix = mix};
  gguf_add_model(w, *model, eo);
  if (is_gguf_path(o.in)) {
    copy_gguf_metadata(w, *GgufSet::open(o.in));
  } else if (fs::exists(fs::path(o.in) / "tokenizer.json")) {
    gguf_add_hf_tokenizer(w, o.in);
  } else {
    std::fprintf(stderr,
                 "ft quantize: %s has no tokenizer.json; the GGUF will have no vocabulary\n",
                 o.in.c_str());
  }
  std::fprintf(stderr, "ft quantize: %s -> %s (%s, %zu tensors, %.1f MiB)\n", o.in.c_str(),
               o.out.c_str(),
               mix != GgufMix::NONE ? o.type.c_str()
               : type              ? std::string(ggml_type_info(*type).name).c_str()
                                   : "source types",
               w.n_tensors(), static_cast<double>(w.data_bytes()) / (1 << 20));
  Progress progress;
  auto files = w.write(o.out, o.split, [&](size_t d, size_t t) { progress(d, t); });
  for (const auto& f : files) std::printf("%s\n", f.c_str());
}

}  // namespace

void add_quantize_command(CLI::App& app) {
  auto o = std::make_shared<QuantizeOptions>();
  auto* cmd = app.add_subcommand("quantize", "Write a GGUF file, its matrices quantized");
  cmd->add_option("IN", o->in, "HF checkpoint directory or .gguf file")->required();
  cmd->add_option("OUT", o->out, "Output .gguf file (a directory with --out-format ftc)")
      ->required();
  cmd->add_option("--type", o->type,
                  "q8_0, q4_0, q4_1, q2_k..q6_k, iq4_nl, iq4_xs, mxfp4, f16, bf16, f32, source "
                  "(keep each tensor's own type), or the mixtures q4_k_m, q5_k_m (Q6_K attn_v and "
                  "ffn_down in the sensitive layers)")
      ->capture_default_str();
  cmd->add_option("--split", o->split, "Write N parts <name>-0000k-of-0000N.gguf")
      ->capture_default_str();
  cmd->add_option("--out-format", o->out_format,
                  "gguf, or ftc: a fast-load checkpoint directory (also takes --type nvfp4, fp8)")
      ->check(CLI::IsMember({"gguf", "ftc"}))
      ->capture_default_str();
  cmd->callback([o] { run_quantize(*o); });
}

}  // namespace ft::cli
