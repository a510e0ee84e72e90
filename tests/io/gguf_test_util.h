// Helpers for the GGUF tests: temp paths, raw byte images of small GGUF files.
#pragma once
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "io/gguf_writer.h"

namespace ft::test {

// A fresh directory under the system temp dir, removed with the object.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    path = std::filesystem::temp_directory_path() /
           ("ft_gguf_" + std::to_string(::getpid()) + "_" + std::to_string(counter()++));
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
  static int& counter() {
    static int n = 0;
    return n;
  }
};

inline std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

inline void spit(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// One value of every metadata type, nested arrays and arrays of strings included.
inline void add_every_type(GgufWriter& w) {
  auto v = [](GgufType t, uint64_t u, int64_t i, double f) {
    GgufValue x;
    x.type = t;
    x.u = u;
    x.i = i;
    x.f = f;
    return x;
  };
  w.set("t.u8", v(GgufType::UINT8, 200, 0, 0));
  w.set("t.i8", v(GgufType::INT8, 0, -100, 0));
  w.set("t.u16", v(GgufType::UINT16, 60000, 0, 0));
  w.set("t.i16", v(GgufType::INT16, 0, -30000, 0));
  w.set("t.u32", GgufValue::u32(4000000000u));
  w.set("t.i32", GgufValue::i32(-2000000000));
  w.set("t.u64", GgufValue::u64(18000000000000000000ull));
  w.set("t.i64", v(GgufType::INT64, 0, -9000000000000000000ll, 0));
  w.set("t.f32", GgufValue::f32(3.25f));
  w.set("t.f64", v(GgufType::FLOAT64, 0, 0, 2.718281828459045));
  w.set("t.bool", GgufValue::boolean(true));
  w.set("t.str", GgufValue::str(std::string("h\xc3\xa9llo\0world", 12)));
  w.set("t.strs", GgufValue::strings({"a", "", "\xe2\x96\x81x", "<|im_end|>"}));
  w.set("t.i32s", GgufValue::i32s({1, -2, 3}));
  w.set("t.nested", GgufValue::array(GgufType::ARRAY,
                                     {GgufValue::strings({"x", "y"}), GgufValue::strings({})}));
  w.set("t.empty", GgufValue::array(GgufType::FLOAT32, {}));
}

}  // namespace ft::test
