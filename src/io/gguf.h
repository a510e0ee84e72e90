// GGUF reader (v2/v3, little-endian): mmapped file, typed metadata, tensor infos validated at
// open, split files (<name>-00001-of-0000N.gguf) joined into one set. Zero-copy tensor data.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/tensor.h"
#include "io/mmap.h"

namespace ft {

// Metadata value types, as the GGUF specification numbers them.
enum class GgufType : uint32_t {
  UINT8 = 0,
  INT8 = 1,
  UINT16 = 2,
  INT16 = 3,
  UINT32 = 4,
  INT32 = 5,
  FLOAT32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  UINT64 = 10,
  INT64 = 11,
  FLOAT64 = 12,
};
std::string_view gguf_type_name(GgufType t);

// One metadata value. Scalars keep their declared type; integers are readable as i64/u64 when
// they fit, floats as f64. Arrays hold their element type and items (arrays may nest).
struct GgufValue {
  GgufType type = GgufType::UINT8;
  uint64_t u = 0;                   // unsigned integers and BOOL
  int64_t i = 0;                    // signed integers
  double f = 0;                     // FLOAT32 / FLOAT64
  std::string s;                    // STRING
  GgufType elem = GgufType::UINT8;  // ARRAY
  std::vector<GgufValue> items;     // ARRAY

  static GgufValue u32(uint32_t v);
  static GgufValue i32(int32_t v);
  static GgufValue u64(uint64_t v);
  static GgufValue f32(float v);
  static GgufValue boolean(bool v);
  static GgufValue str(std::string v);
  static GgufValue array(GgufType elem, std::vector<GgufValue> items);
  static GgufValue strings(const std::vector<std::string>& v);
  static GgufValue f32s(const std::vector<float>& v);
  static GgufValue i32s(const std::vector<int32_t>& v);

  bool is_int() const;
  bool is_number() const {
    return is_int() || type == GgufType::FLOAT32 || type == GgufType::FLOAT64;
  }
  bool operator==(const GgufValue& o) const;
};

// ggml tensor types by id: name, elements per block, bytes per block (0 bytes: unknown id).
struct GgmlTypeInfo {
  std::string_view name;
  int64_t block_elems;
  int64_t block_bytes;
};
GgmlTypeInfo ggml_type_info(uint32_t type);
constexpr uint32_t k_ggml_f32 = 0, k_ggml_f16 = 1, k_ggml_bf16 = 30;
// The DType of an unquantized ggml type (F32/F16/BF16/I8/I16/I32/I64/F64); false otherwise.
bool ggml_plain_dtype(uint32_t type, DType* out);

// One tensor: ne[0] is the innermost (contiguous) dimension, as GGUF stores it.
struct GgufTensor {
  std::string name;
  uint32_t type = 0;
  std::vector<int64_t> ne;  // GGUF order (innermost first), 1..4 dims
  const void* data = nullptr;
  size_t nbytes = 0;
  std::string file;  // the file that holds it (errors)

  int64_t numel() const;
  // Row-major shape, outermost first (ne reversed): a [rows, cols] matrix has ne = {cols, rows}.
  std::vector<int64_t> shape() const { return {ne.rbegin(), ne.rend()}; }
  std::string shape_str() const;
  // A zero-copy TensorView; throws ft::Error unless the type is unquantized (ggml_plain_dtype).
  TensorView view() const;
};

// One .gguf file: header, metadata and tensor infos parsed and validated at open.
class GgufFile {
 public:
  // Throws ft::Error naming the file for a bad magic, unsupported version, truncation, counts
  // or strings larger than the file, bad types, dims that overflow, offsets past the end.
  explicit GgufFile(const std::string& path);
  // Parses a file image in memory (fuzz tests); `name` is used in errors. The bytes must
  // outlive the object.
  GgufFile(const char* data, size_t size, const std::string& name);

  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  const std::map<std::string, GgufValue>& metadata() const { return kv_; }
  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const std::string& path() const { return path_; }
  size_t data_offset() const { return data_offset_; }

 private:
  void parse(const char* data, size_t size);
  MappedFile file_;
  std::string path_;
  uint32_t version_ = 0, alignment_ = 32;
  size_t data_offset_ = 0;
  std::map<std::string, GgufValue> kv_;
  std::vector<GgufTensor> tensors_;
};

// A model stored as one .gguf or as split files: metadata of the first file, tensors of all.
class GgufSet {
 public:
  // path: a .gguf file; "-00001-of-00003.gguf" (or split.count metadata) opens every part.
  static std::unique_ptr<GgufSet> open(const std::string& path);

  const std::string& path() const { return path_; }
  const std::map<std::string, GgufValue>& metadata() const { return files_[0]->metadata(); }
  const GgufValue* find(const std::string& key) const;
  bool has(const std::string& key) const { return find(key) != nullptr; }
  // Typed getters: throw ft::Error naming the file and key when missing or of the wrong type.
  int64_t get_int(const std::string& key) const;
  int64_t get_int_or(const std::string& key, int64_t dflt) const;
  double get_float(const std::string& key) const;
  double get_float_or(const std::string& key, double dflt) const;
  bool get_bool_or(const std::string& key, bool dflt) const;
  std::string get_string(const std::string& key) const;
  std::string get_string_or(const std::string& key, const std::string& dflt) const;
  // An array of strings / numbers (any integer or float element type).
  std::vector<std::string> get_strings(const std::string& key) const;
  std::vector<double> get_numbers(const std::string& key) const;

  const GgufTensor* tensor(const std::string& name) const;
  const GgufTensor& get_tensor(const std::string& name) const;  // throws ft::Error if missing
  std::vector<std::string> tensor_names() const;
  size_t n_files() const { return files_.size(); }

 private:
  std::string path_;
  std::vector<std::unique_ptr<GgufFile>> files_;
  std::map<std::string, const GgufTensor*> index_;
};

// "<stem>-00001-of-00003.gguf" -> 3 file names; an unsplit name -> itself.
std::vector<std::string> gguf_split_paths(const std::string& first, int count);
// True for a path ending in .gguf (case-insensitive).
bool is_gguf_path(const std::string& path);

}  // namespace ft
