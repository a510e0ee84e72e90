// Fast-load checkpoint time-to-ready vs the disk's read bandwidth: writes a synthetic
// Qwen3-MoE-shaped model (bf16, ~1.5 GB by default) as a fast-load checkpoint, measures the
// disk with a large O_DIRECT read of an equal-sized scratch file, then times Model::load_ftc
// (O_DIRECT into page-aligned memory + views) and the first forward pass.
// usage: ftc_load_bench DIR [--layers 12] [--experts 40] [--repeat 3]
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

#include "base/timer.h"
#include "io/direct_read.h"
#include "model/ft_checkpoint.h"
#include "model/transformer.h"

using namespace ft;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DIR [--layers N] [--experts N] [--repeat N]\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  int64_t layers = 12, experts = 40;
  int repeat = 3;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--layers")) layers = std::stoll(argv[i + 1]);
    if (!std::strcmp(argv[i], "--experts")) experts = std::stoll(argv[i + 1]);
    if (!std::strcmp(argv[i], "--repeat")) repeat = std::stoi(argv[i + 1]);
  }
  try {
    if (!is_ft_checkpoint(dir)) {
      const ModelConfig c = synthetic_moe_config({.layers = layers,
                                                  .experts = experts,
                                                  .top_k = 8,
                                                  .hidden = 1024,
                                                  .expert_dim = 512,
                                                  .heads = 16,
                                                  .kv_heads = 4,
                                                  .head_dim = 64,
                                                  .vocab = 32768});
      auto m = Model::synthetic(c, 1);
      Timer t;
      write_ft_checkpoint(*m, "(synthetic)", dir);
      std::printf("wrote %s: %.2f GB in %.1f s\n", dir.c_str(),
                  static_cast<double>(std::filesystem::file_size(dir + "/" + k_ftc_data)) / 1e9,
                  t.seconds());
    }
    const std::string data = dir + "/" + k_ftc_data;
    const size_t bytes = std::filesystem::file_size(data);
    // The disk: an O_DIRECT read of a scratch copy-sized file (never read before, so no cache
    // can help either measurement; O_DIRECT bypasses the page cache anyway).
    const std::string scratch = dir + "/disk_probe.bin";
    if (!std::filesystem::exists(scratch) || std::filesystem::file_size(scratch) != bytes) {
      std::filesystem::copy_file(data, scratch, std::filesystem::copy_options::overwrite_existing);
      ::sync();
    }
    HostBuffer buf(bytes);
    for (int r = 0; r < repeat; ++r) {
      const DirectReadStats disk =
          read_file_direct(scratch, buf.data(), bytes, {}, 1, size_t{64} << 20);
      const DirectReadStats disk4 = read_file_direct(scratch, buf.data(), bytes, {}, 4);
      Timer tm;
      {
        HostBuffer fresh(bytes);  // what a fresh buffer costs: page faults + zeroing
        for (size_t i = 0; i < bytes; i += 4096) fresh.data()[i] = 1;
      }
      const double fresh_s = tm.seconds();
      Timer t;
      auto m = Model::load_ftc(dir);
      const double ready = t.seconds();
      ThreadPool pool(0);
      Transformer tf(*m, pool, 1);
      KVCache kv(m->config(), 8);
      std::vector<float> logits(m->config().vocab_size);
      const int32_t id = 1;
      Timer t2;
      tf.forward(&id, 1, 0, kv, logits.data(), false);
      std::printf(
          "run %d: %.2f GB  disk O_DIRECT 1x64MiB %.2f GB/s, 4x32MiB %.2f GB/s (%s)  |  "
          "load_ftc %.2f s = %.2f GB/s (%.0f%% of the 4-thread disk read; faulting in a fresh "
          "buffer alone: %.2f s)  first token +%.3f s\n",
          r, static_cast<double>(bytes) / 1e9, disk.gb_per_s(), disk4.gb_per_s(),
          disk.direct ? "O_DIRECT" : "buffered", ready, static_cast<double>(bytes) / ready / 1e9,
          100.0 * (static_cast<double>(bytes) / ready / 1e9) / disk4.gb_per_s(), fresh_s,
          t2.seconds());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ftc_load_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
