// GGUF reader/writer: every metadata type round-trips, tensors keep bytes and shapes, alignment
// is honoured, split files join, and malformed files are one clear ft::Error each.
#include "io/gguf.h"

#include <gtest/gtest.h>

#include <cstring>

#include "base/error.h"
#include "gguf_test_util.h"
#include "io/gguf_writer.h"

namespace ft {
namespace {

using test::TempDir;

template <typename T>
void put(std::string& s, T v) {
  s.append(reinterpret_cast<const char*>(&v), sizeof v);
}
void put_str(std::string& s, const std::string& x) {
  put<uint64_t>(s, x.size());
  s += x;
}
std::string header(uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
  std::string s;
  put<uint32_t>(s, 0x46554747);
  put<uint32_t>(s, version);
  put<uint64_t>(s, n_tensors);
  put<uint64_t>(s, n_kv);
  return s;
}
// One tensor info: name, dims (GGUF order), type, offset.
void tensor_info(std::string& s, const std::string& name, std::vector<uint64_t> ne, uint32_t type,
                 uint64_t offset) {
  put_str(s, name);
  put<uint32_t>(s, static_cast<uint32_t>(ne.size()));
  for (uint64_t d : ne) put<uint64_t>(s, d);
  put<uint32_t>(s, type);
  put<uint64_t>(s, offset);
}
void pad_to(std::string& s, size_t a) { s.resize((s.size() + a - 1) / a * a, '\0'); }

std::string parse_error(const std::string& bytes) {
  try {
    GgufFile f(bytes.data(), bytes.size(), "mem.gguf");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Gguf, EveryMetadataTypeRoundTrips) {
  TempDir tmp;
  GgufWriter w;
  test::add_every_type(w);
  w.write(tmp.file("m.gguf"));
  GgufFile f(tmp.file("m.gguf"));
  EXPECT_EQ(f.version(), 3u);
  GgufWriter ref;
  test::add_every_type(ref);
  // Re-encode the reference values the way the writer does and compare value by value.
  const auto& md = f.metadata();
  EXPECT_EQ(md.size(), 16u);
  EXPECT_EQ(md.at("t.u8").u, 200u);
  EXPECT_EQ(md.at("t.i8").i, -100);
  EXPECT_EQ(md.at("t.u16").u, 60000u);
  EXPECT_EQ(md.at("t.i16").i, -30000);
  EXPECT_EQ(md.at("t.u32").u, 4000000000u);
  EXPECT_EQ(md.at("t.i32").i, -2000000000);
  EXPECT_EQ(md.at("t.u64").u, 18000000000000000000ull);
  EXPECT_EQ(md.at("t.i64").i, -9000000000000000000ll);
  EXPECT_EQ(md.at("t.f32").f, 3.25);
  EXPECT_EQ(md.at("t.f64").f, 2.718281828459045);
  EXPECT_EQ(md.at("t.bool").u, 1u);
  EXPECT_EQ(md.at("t.str").s, std::string("h\xc3\xa9llo\0world", 12));
  ASSERT_EQ(md.at("t.strs").items.size(), 4u);
  EXPECT_EQ(md.at("t.strs").items[2].s, "\xe2\x96\x81x");
  EXPECT_EQ(md.at("t.nested").elem, GgufType::ARRAY);
  EXPECT_EQ(md.at("t.nested").items[0].items[1].s, "y");
  EXPECT_EQ(md.at("t.nested").items[1].items.size(), 0u);
  EXPECT_EQ(md.at("t.empty").elem, GgufType::FLOAT32);
  // Writing what was read and reading it again gives the same values.
  GgufWriter again;
  for (const auto& [k, v] : md) again.set(k, v);
  again.write(tmp.file("a.gguf"));
  EXPECT_EQ(GgufFile(tmp.file("a.gguf")).metadata(), md);
}

TEST(Gguf, TypedGettersNameTheKey) {
  TempDir tmp;
  GgufWriter w;
  test::add_every_type(w);
  w.write(tmp.file("m.gguf"));
  auto g = GgufSet::open(tmp.file("m.gguf"));
  EXPECT_EQ(g->get_int("t.u32"), 4000000000);
  EXPECT_EQ(g->get_int("t.i8"), -100);
  EXPECT_EQ(g->get_float("t.f32"), 3.25);
  EXPECT_EQ(g->get_float("t.u16"), 60000.0);
  EXPECT_TRUE(g->get_bool_or("t.bool", false));
  EXPECT_EQ(g->get_strings("t.strs")[3], "<|im_end|>");
  EXPECT_EQ(g->get_numbers("t.i32s"), (std::vector<double>{1, -2, 3}));
  EXPECT_EQ(g->get_int_or("absent", 7), 7);
  EXPECT_THROW(g->get_int("t.u64"), Error);  // does not fit int64
  try {
    g->get_string("t.u8");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("t.u8"), std::string::npos) << e.what();
  }
  EXPECT_THROW(g->get_int("missing.key"), Error);
  EXPECT_THROW(g->get_strings("t.i32s"), Error);
}

TEST(Gguf, TensorsKeepBytesShapesAndAlignment) {
  for (uint32_t align : {32u, 64u, 256u}) {
    TempDir tmp;
    GgufWriter w;
    w.alignment = align;
    w.set("general.architecture", GgufValue::str("test"));
    std::vector<float> a(3 * 5);
    for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i) * 0.5f;
    std::vector<uint16_t> b(7);
    for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint16_t>(0x3c00 + i);
    std::vector<uint8_t> q(2 * 34 * 2);  // Q8_0 [2, 64]
    for (size_t i = 0; i < q.size(); ++i) q[i] = static_cast<uint8_t>(i * 7);
    w.add_tensor("a", k_ggml_f32, {3, 5}, a.data());
    w.add_tensor("b", k_ggml_f16, {7}, b.data());
    w.add_tensor("q", 8, {2, 64}, q.data());
    w.write(tmp.file("t.gguf"));
    GgufFile f(tmp.file("t.gguf"));
    EXPECT_EQ(f.alignment(), align);
    EXPECT_EQ(f.data_offset() % align, 0u);
    ASSERT_EQ(f.tensors().size(), 3u);
    const GgufTensor& ta = f.tensors()[0];
    EXPECT_EQ(ta.ne, (std::vector<int64_t>{5, 3}));
    EXPECT_EQ(ta.shape(), (std::vector<int64_t>{3, 5}));
    EXPECT_EQ(ta.nbytes, a.size() * 4);
    EXPECT_EQ(std::memcmp(ta.data, a.data(), ta.nbytes), 0);
    TensorView va = ta.view();
    EXPECT_EQ(va.dtype, DType::F32);
    EXPECT_EQ(va.shape_str(), "[3, 5]");
    EXPECT_EQ(f.tensors()[1].view().dtype, DType::F16);
    EXPECT_EQ(std::memcmp(f.tensors()[1].data, b.data(), 14), 0);
    const GgufTensor& tq = f.tensors()[2];
    EXPECT_EQ(tq.nbytes, q.size());
    EXPECT_EQ(std::memcmp(tq.data, q.data(), q.size()), 0);
    EXPECT_THROW(tq.view(), Error);  // quantized: no plain view
    for (const auto& t : f.tensors())
      EXPECT_EQ((static_cast<const char*>(t.data) - static_cast<const char*>(f.tensors()[0].data)) %
                    align,
                0);
  }
}

TEST(Gguf, SplitFilesJoinAsOneModel) {
  TempDir tmp;
  GgufWriter w;
  w.set("general.architecture", GgufValue::str("test"));
  w.set("x.value", GgufValue::u32(42));
  std::vector<std::vector<float>> data;
  for (int i = 0; i < 7; ++i) data.emplace_back(16 * (i + 1), static_cast<float>(i));
  for (int i = 0; i < 7; ++i)
    w.add_tensor("t" + std::to_string(i), k_ggml_f32, {i + 1, 16}, data[i].data());
  auto files = w.write(tmp.file("model.gguf"), 3);
  ASSERT_EQ(files.size(), 3u);
  EXPECT_EQ(files[0], tmp.file("model-00001-of-00003.gguf"));
  EXPECT_EQ(files[2], tmp.file("model-00003-of-00003.gguf"));
  for (const auto& f : files) EXPECT_GT(GgufFile(f).tensors().size(), 0u);
  EXPECT_FALSE(GgufFile(files[1]).metadata().count("x.value"));  // metadata in part 1 only
  for (const std::string& open_as : {files[0], files[2]}) {
    auto g = GgufSet::open(open_as);
    EXPECT_EQ(g->n_files(), 3u);
    EXPECT_EQ(g->get_int("x.value"), 42);
    EXPECT_EQ(g->get_int("split.count"), 3);
    ASSERT_EQ(g->tensor_names().size(), 7u);
    for (int i = 0; i < 7; ++i) {
      const GgufTensor& t = g->get_tensor("t" + std::to_string(i));
      EXPECT_EQ(t.shape(), (std::vector<int64_t>{i + 1, 16}));
      EXPECT_EQ(std::memcmp(t.data, data[i].data(), t.nbytes), 0);
    }
  }
  std::filesystem::remove(files[1]);
  try {
    GgufSet::open(files[0]);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing"), std::string::npos) << e.what();
  }
  EXPECT_EQ(gguf_split_paths(tmp.file("a.gguf"), 1),
            (std::vector<std::string>{tmp.file("a.gguf")}));
}

TEST(Gguf, VersionTwoIsRead) {
  std::string s = header(2, 0, 1);
  put_str(s, "general.architecture");
  put<uint32_t>(s, 8);
  put_str(s, "qwen3moe");
  GgufFile f(s.data(), s.size(), "v2.gguf");
  EXPECT_EQ(f.version(), 2u);
  EXPECT_EQ(f.metadata().at("general.architecture").s, "qwen3moe");
}

struct BadCase {
  const char* name;
  std::string bytes;
  const char* message;
};

std::vector<BadCase> bad_cases() {
  std::vector<BadCase> v;
  v.push_back({"empty", "", "too small"});
  v.push_back({"magic", "GGML" + std::string(20, '\0'), "bad magic"});
  v.push_back({"v1", header(1, 0, 0), "v1 is not supported"});
  v.push_back({"v9", header(9, 0, 0), "version 9"});
  {
    std::string s;
    put<uint32_t>(s, 0x46554747);
    put<uint32_t>(s, 0x03000000);  // big-endian 3
    s += std::string(16, '\0');
    v.push_back({"big-endian", s, "big-endian"});
  }
  v.push_back({"kv-count", header(3, 0, 1ull << 60), "metadata entries"});
  v.push_back({"tensor-count", header(3, 1ull << 60, 0), "tensors"});
  {
    std::string s = header(3, 0, 1);
    put<uint64_t>(s, 1ull << 40);  // key length
    s += std::string(64, 'k');
    v.push_back({"huge-key", s, "claims a string"});
  }
  {
    std::string s = header(3, 0, 1);
    put_str(s, "k");
    put<uint32_t>(s, 8);
    put<uint64_t>(s, ~0ull);
    v.push_back({"huge-string", s, "claims a string"});
  }
  {
    std::string s = header(3, 0, 1);
    put_str(s, "k");
    put<uint32_t>(s, 13);
    v.push_back({"value-type", s, "unknown value type 13"});
  }
  {
    std::string s = header(3, 0, 1);
    put_str(s, "k");
    put<uint32_t>(s, 9);
    put<uint32_t>(s, 8);
    put<uint64_t>(s, 1ull << 61);
    v.push_back({"array-count", s, "array items"});
  }
  {
    std::string s = header(3, 0, 1);
    put_str(s, "k");
    put<uint32_t>(s, 9);
    for (int d = 0; d < 20; ++d) {  // arrays of arrays of ...
      put<uint32_t>(s, 9);
      put<uint64_t>(s, 1);
    }
    s += std::string(64, '\0');
    v.push_back({"deep-nesting", s, "nests arrays"});
  }
  {
    std::string s = header(3, 0, 2);
    for (int i = 0; i < 2; ++i) {
      put_str(s, "dup");
      put<uint32_t>(s, 4);
      put<uint32_t>(s, 1);
    }
    v.push_back({"duplicate-key", s, "appears twice"});
  }
  {
    std::string s = header(3, 0, 1);
    put_str(s, "k");
    put<uint32_t>(s, 7);
    put<uint8_t>(s, 5);
    v.push_back({"bad-bool", s, "bool"});
  }
  {
    std::string s = header(3, 0, 1);
    put_str(s, "general.alignment");
    put<uint32_t>(s, 4);
    put<uint32_t>(s, 48);
    v.push_back({"alignment", s, "power of two"});
  }
  auto one_tensor = [](std::vector<uint64_t> ne, uint32_t type, uint64_t off, size_t data) {
    std::string s = header(3, 1, 0);
    tensor_info(s, "w", std::move(ne), type, off);
    pad_to(s, 32);
    s += std::string(data, '\0');
    return s;
  };
  v.push_back({"dims-0", one_tensor({}, 0, 0, 64), "dimensions"});
  v.push_back({"dims-5", one_tensor({1, 1, 1, 1, 1}, 0, 0, 64), "dimensions"});
  v.push_back({"dim-zero", one_tensor({4, 0}, 0, 0, 64), "dimension"});
  v.push_back({"dim-overflow", one_tensor({1ull << 40, 1ull << 40}, 0, 0, 64), "dimension"});
  v.push_back({"ggml-type", one_tensor({4}, 99, 0, 64), "unknown ggml type 99"});
  v.push_back({"removed-type", one_tensor({4}, 4, 0, 64), "unknown ggml type 4"});
  v.push_back({"block", one_tensor({48}, 8, 0, 64), "multiple of the 32-element block"});
  v.push_back({"misaligned", one_tensor({4}, 0, 8, 64), "not a multiple of the alignment"});
  v.push_back({"past-end", one_tensor({64}, 0, 0, 64), "past the end"});
  v.push_back({"offset-past-end", one_tensor({4}, 0, 1ull << 62, 64), "past the end"});
  {
    std::string s = header(3, 2, 0);
    tensor_info(s, "w", {4}, 0, 0);
    tensor_info(s, "w", {4}, 0, 32);
    pad_to(s, 32);
    s += std::string(64, '\0');
    v.push_back({"duplicate-tensor", s, "appears twice"});
  }
  {
    std::string s = one_tensor({8}, 0, 0, 32);
    v.push_back({"truncated-data", s.substr(0, s.size() - 1), "past the end"});
  }
  return v;
}

TEST(Gguf, MalformedFilesAreClearErrors) {
  for (const BadCase& c : bad_cases()) {
    std::string msg = parse_error(c.bytes);
    EXPECT_NE(msg, "") << c.name << ": accepted";
    EXPECT_NE(msg.find(c.message), std::string::npos) << c.name << ": " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << c.name << ": multi-line " << msg;
    EXPECT_EQ(msg.rfind("mem.gguf", 0), 0u) << c.name << ": error does not name the file: " << msg;
  }
}

TEST(Gguf, EveryTruncationOfAValidFileIsAnError) {
  TempDir tmp;
  GgufWriter w;
  test::add_every_type(w);
  std::vector<float> a(64, 1.f);
  w.add_tensor("a", k_ggml_f32, {2, 32}, a.data());
  w.write(tmp.file("m.gguf"));
  const std::string bytes = test::slurp(tmp.file("m.gguf"));
  EXPECT_EQ(parse_error(bytes), "");
  for (size_t n = 0; n < bytes.size(); ++n)
    EXPECT_NE(parse_error(bytes.substr(0, n)), "") << "prefix of " << n << " bytes accepted";
}

TEST(Gguf, OpenNamesMissingFilesAndRecognisesPaths) {
  EXPECT_TRUE(is_gguf_path("/a/b/Model-Q4_K_M.GGUF"));
  EXPECT_FALSE(is_gguf_path("/a/b/model.safetensors"));
  EXPECT_THROW(GgufSet::open("/nonexistent/x.gguf"), Error);
  // Opening a later part finds the first one.
  EXPECT_EQ(gguf_split_paths("/m/x-00002-of-00004.gguf", 0)[0], "/m/x-00001-of-00004.gguf");
}

}  // namespace
}  // namespace ft
