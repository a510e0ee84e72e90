// Deterministic GGUF fuzzing: valid files (every metadata type; a model with a tokenizer) are
// mutated thousands of times (bit flips, interesting values over length and count fields,
// truncations, spliced chunks). Parsing, and for a share of cases loading the model and the
// tokenizer, must either succeed or throw ft::Error: never crash, hang or throw anything else.
#include <gtest/gtest.h>

#include <chrono>
#include <random>

#include "base/error.h"
#include "gguf_test_util.h"
#include "io/gguf.h"
#include "model/gguf_export.h"
#include "model/model.h"
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/tokenizer.h"

namespace ft {
namespace {

using test::TempDir;

struct Mutator {
  std::mt19937_64 rng;
  explicit Mutator(uint64_t seed) : rng(seed) {}
  size_t pick(size_t n) { return n ? std::uniform_int_distribution<size_t>(0, n - 1)(rng) : 0; }

  std::string mutate(const std::string& in) {
    std::string s = in;
    const int edits = 1 + static_cast<int>(pick(4));
    for (int e = 0; e < edits && !s.empty(); ++e) {
      switch (pick(7)) {
        case 0:  // bit flip
          s[pick(s.size())] ^= static_cast<char>(1u << pick(8));
          break;
        case 1: {  // an interesting 64-bit value over a length / count / offset field
          static constexpr uint64_t vals[] = {
              0,          1,          0x7f,       0x80,       0xff,  0xffff,
              0x7fffffff, 0xffffffff, 1ull << 32, 1ull << 62, ~0ull, 0x8000000000000000ull};
          uint64_t v = vals[pick(std::size(vals))];
          size_t at = pick(s.size());
          for (size_t k = 0; k < 8 && at + k < s.size(); ++k)
            s[at + k] = static_cast<char>(v >> (8 * k));
          break;
        }
        case 2: {  // small integer (types, dims) at a 4-byte boundary of the header region
          size_t at = pick(std::min<size_t>(s.size(), 4096)) & ~size_t{3};
          uint32_t v = static_cast<uint32_t>(pick(40));
          for (size_t k = 0; k < 4 && at + k < s.size(); ++k)
            s[at + k] = static_cast<char>(v >> (8 * k));
          break;
        }
        case 3:  // truncate
          s.resize(pick(s.size()));
          break;
        case 4: {  // duplicate a chunk elsewhere
          size_t a = pick(s.size()), n = std::min(pick(64) + 1, s.size() - a);
          s.insert(pick(s.size()), s.substr(a, n));
          break;
        }
        case 5: {  // delete a chunk
          size_t a = pick(s.size());
          s.erase(a, std::min(pick(32) + 1, s.size() - a));
          break;
        }
        default:  // random byte
          s[pick(s.size())] = static_cast<char>(pick(256));
          break;
      }
    }
    return s;
  }
};

// Parses bytes; returns true if accepted. Anything but ft::Error fails the test.
bool parse(const std::string& bytes) {
  try {
    GgufFile f(bytes.data(), bytes.size(), "fuzz.gguf");
    return true;
  } catch (const Error&) {
    return false;
  }
}

// GPT-2's byte-level alphabet: printable Latin-1 bytes map to themselves, the rest to U+0100...
std::vector<std::string> byte_alphabet() {
  std::vector<std::string> out;
  int extra = 0;
  for (int b = 0; b < 256; ++b) {
    const bool keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
    const uint32_t cp = keep ? static_cast<uint32_t>(b) : 256u + static_cast<uint32_t>(extra++);
    std::string u;
    if (cp < 0x80) {
      u += static_cast<char>(cp);
    } else {
      u += static_cast<char>(0xc0 | (cp >> 6));
      u += static_cast<char>(0x80 | (cp & 0x3f));
    }
    out.push_back(u);
  }
  return out;
}

std::string metadata_file(const TempDir& tmp) {
  GgufWriter w;
  test::add_every_type(w);
  std::vector<float> a(2 * 32, 0.5f);
  std::vector<uint8_t> q(2 * 34, 3);
  w.add_tensor("a", k_ggml_f32, {2, 32}, a.data());
  w.add_tensor("q", 8, {2, 32}, q.data());
  w.write(tmp.file("meta.gguf"));
  return test::slurp(tmp.file("meta.gguf"));
}

TEST(GgufFuzz, MutatedMetadataFilesNeverCrash) {
  TempDir tmp;
  const std::string valid = metadata_file(tmp);
  ASSERT_TRUE(parse(valid));
  Mutator m(0x6775'6666);
  int accepted = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 20000; ++i) accepted += parse(m.mutate(valid));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[ fuzz ] metadata file: 20000 mutations, %d accepted, %.2f s\n", accepted, s);
  EXPECT_GT(accepted, 0);
}

// The qwen3_moe fixture with the demo tokenizer: parse every mutation, and for every 8th one
// load the model and the tokenizer from a file (shapes, metadata and vocabulary paths).
TEST(GgufFuzz, MutatedModelFilesLoadOrFailCleanly) {
  TempDir tmp;
  auto model = Model::load(std::string(FT_FIXTURES) + "/qwen3_moe");
  GgufWriter w;
  gguf_add_model(w, *model, {});
  // A small vocabulary keeps each tokenizer load fast: the 256 byte-level characters + 2.
  w.set("tokenizer.ggml.model", GgufValue::str("gpt2"));
  w.set("tokenizer.ggml.pre", GgufValue::str("qwen2"));
  std::vector<std::string> toks = byte_alphabet();
  toks.push_back("ab");
  toks.push_back("<|im_end|>");
  w.set("tokenizer.ggml.tokens", GgufValue::strings(toks));
  std::vector<int32_t> types(toks.size(), 1);
  types.back() = 3;
  w.set("tokenizer.ggml.token_type", GgufValue::i32s(types));
  w.set("tokenizer.ggml.merges", GgufValue::strings({"a b"}));
  w.set("tokenizer.ggml.eos_token_id", GgufValue::u32(static_cast<uint32_t>(toks.size() - 1)));
  w.set("tokenizer.chat_template", GgufValue::str("{{ messages[0]['content'] }}"));
  w.write(tmp.file("model.gguf"));
  const std::string valid = test::slurp(tmp.file("model.gguf"));
  ASSERT_NO_THROW(Model::load(tmp.file("model.gguf")));
  ASSERT_NO_THROW(Tokenizer::load(tmp.file("model.gguf")));
  Mutator m(0x6d6f'64656c);
  int parsed = 0, models = 0, tokenizers = 0;
  const std::string path = tmp.file("mut.gguf");
  for (int i = 0; i < 8000; ++i) {
    const std::string bytes = m.mutate(valid);
    parsed += parse(bytes);
    if (i % 8 != 0) continue;
    test::spit(path, bytes);
    try {
      Model::load(path);
      ++models;
    } catch (const Error&) {
    }
    try {
      Tokenizer t = Tokenizer::load(path);
      t.encode("ab <|im_end|> x", true);
      ++tokenizers;
    } catch (const Error&) {
    }
  }
  std::printf(
      "[ fuzz ] model file: 8000 mutations, %d parsed, %d models and %d tokenizers "
      "loaded of 1000\n",
      parsed, models, tokenizers);
  EXPECT_GT(models, 0);
  EXPECT_GT(tokenizers, 0);
}

}  // namespace
}  // namespace ft
