// GGUF parsing: a bounds-checked cursor over the file image; every count, length, dim and
// offset is checked against what the file can hold before anything is allocated or read.
#include "io/gguf.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstring>

#include "base/error.h"

namespace ft {

namespace {

constexpr uint32_t k_magic = 0x46554747;  // "GGUF" little-endian
constexpr int k_max_depth = 8;            // nested arrays
constexpr uint32_t k_max_dims = 4;        // GGML_MAX_DIMS

struct TypeRow {
  uint32_t id;
  GgmlTypeInfo info;
};
// ggml type ids with their block geometry (ggml's type_traits). Removed ids are absent.
constexpr TypeRow k_ggml_types[] = {
    {0, {"F32", 1, 4}},         {1, {"F16", 1, 2}},         {2, {"Q4_0", 32, 18}},
    {3, {"Q4_1", 32, 20}},      {6, {"Q5_0", 32, 22}},      {7, {"Q5_1", 32, 24}},
    {8, {"Q8_0", 32, 34}},      {9, {"Q8_1", 32, 36}},      {10, {"Q2_K", 256, 84}},
    {11, {"Q3_K", 256, 110}},   {12, {"Q4_K", 256, 144}},   {13, {"Q5_K", 256, 176}},
    {14, {"Q6_K", 256, 210}},   {15, {"Q8_K", 256, 292}},   {16, {"IQ2_XXS", 256, 66}},
    {17, {"IQ2_XS", 256, 74}},  {18, {"IQ3_XXS", 256, 98}}, {19, {"IQ1_S", 256, 50}},
    {20, {"IQ4_NL", 32, 18}},   {21, {"IQ3_S", 256, 110}},  {22, {"IQ2_S", 256, 82}},
    {23, {"IQ4_XS", 256, 136}}, {24, {"I8", 1, 1}},         {25, {"I16", 1, 2}},
    {26, {"I32", 1, 4}},        {27, {"I64", 1, 8}},        {28, {"F64", 1, 8}},
    {29, {"IQ1_M", 256, 56}},   {30, {"BF16", 1, 2}},       {34, {"TQ1_0", 256, 54}},
    {35, {"TQ2_0", 256, 66}},   {39, {"MXFP4", 32, 17}},
};

// Smallest encoded size of one value of each metadata type (bounds array counts up front).
size_t min_value_bytes(GgufType t) {
  switch (t) {
    case GgufType::UINT8:
    case GgufType::INT8:
    case GgufType::BOOL:
      return 1;
    case GgufType::UINT16:
    case GgufType::INT16:
      return 2;
    case GgufType::UINT32:
    case GgufType::INT32:
    case GgufType::FLOAT32:
      return 4;
    case GgufType::UINT64:
    case GgufType::INT64:
    case GgufType::FLOAT64:
      return 8;
    case GgufType::STRING:
      return 8;
    case GgufType::ARRAY:
      return 12;
  }
  return 0;
}

class Cursor {
 public:
  Cursor(const char* p, size_t n, const std::string& name) : p_(p), n_(n), name_(name) {}
  size_t pos() const { return pos_; }
  size_t left() const { return n_ - pos_; }

  template <typename T>
  T read(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  std::string string(const char* what) {
    uint64_t len = read<uint64_t>(what);
    if (len > left())
      fail(
          "{}: {} claims a string of {} bytes at offset {} but only {} remain (corrupt or "
          "truncated file)",
          name_, what, len, pos_, left());
    std::string s(p_ + pos_, len);
    pos_ += len;
    return s;
  }

  GgufValue value(GgufType t, const std::string& key, int depth) {
    GgufValue v;
    v.type = t;
    switch (t) {
      case GgufType::UINT8:
        v.u = read<uint8_t>(key.c_str());
        break;
      case GgufType::INT8:
        v.i = read<int8_t>(key.c_str());
        break;
      case GgufType::UINT16:
        v.u = read<uint16_t>(key.c_str());
        break;
      case GgufType::INT16:
        v.i = read<int16_t>(key.c_str());
        break;
      case GgufType::UINT32:
        v.u = read<uint32_t>(key.c_str());
        break;
      case GgufType::INT32:
        v.i = read<int32_t>(key.c_str());
        break;
      case GgufType::UINT64:
        v.u = read<uint64_t>(key.c_str());
        break;
      case GgufType::INT64:
        v.i = read<int64_t>(key.c_str());
        break;
      case GgufType::FLOAT32:
        v.f = read<float>(key.c_str());
        break;
      case GgufType::FLOAT64:
        v.f = read<double>(key.c_str());
        break;
      case GgufType::BOOL: {
        uint8_t b = read<uint8_t>(key.c_str());
        if (b > 1) fail("{}: metadata '{}' is a bool with value {} (corrupt file)", name_, key, b);
        v.u = b;
        break;
      }
      case GgufType::STRING:
        v.s = string(key.c_str());
        break;
      case GgufType::ARRAY: {
        if (depth >= k_max_depth)
          fail("{}: metadata '{}' nests arrays deeper than {} (corrupt file)", name_, key,
               k_max_depth);
        v.elem = value_type(key);
        uint64_t count = read<uint64_t>(key.c_str());
        if (count > left() / min_value_bytes(v.elem))
          fail(
              "{}: metadata '{}' claims {} array items of type {} but only {} bytes remain "
              "(corrupt or truncated file)",
              name_, key, count, gguf_type_name(v.elem), left());
        v.items.reserve(count);
        for (uint64_t k = 0; k < count; ++k) v.items.push_back(value(v.elem, key, depth + 1));
        break;
      }
    }
    return v;
  }

  GgufType value_type(const std::string& key) {
    uint32_t t = read<uint32_t>(key.c_str());
    if (t > static_cast<uint32_t>(GgufType::FLOAT64))
      fail("{}: metadata '{}' has unknown value type {} (corrupt file or a newer GGUF)", name_, key,
           t);
    return static_cast<GgufType>(t);
  }

 private:
  void need(size_t k, const char* what) {
    if (k > left())
      fail(
          "{}: truncated while reading {} at offset {} ({} bytes needed, {} left); download the "
          "file again",
          name_, what, pos_, k, left());
  }
  const char* p_;
  size_t n_, pos_ = 0;
  const std::string& name_;
};

// a * b with overflow detection (non-negative operands).
bool mul_ok(int64_t a, int64_t b, int64_t* out) { return !__builtin_mul_overflow(a, b, out); }

}  // namespace

std::string_view gguf_type_name(GgufType t) {
  static constexpr std::string_view names[] = {"uint8",  "int8",    "uint16", "int16",  "uint32",
                                               "int32",  "float32", "bool",   "string", "array",
                                               "uint64", "int64",   "float64"};
  auto i = static_cast<uint32_t>(t);
  return i < std::size(names) ? names[i] : "?";
}

GgmlTypeInfo ggml_type_info(uint32_t type) {
  for (const auto& r : k_ggml_types)
    if (r.id == type) return r.info;
  return {"?", 1, 0};
}

bool ggml_plain_dtype(uint32_t type, DType* out) {
  switch (type) {
    case 0:
      *out = DType::F32;
      return true;
    case 1:
      *out = DType::F16;
      return true;
    case 24:
      *out = DType::I8;
      return true;
    case 25:
      *out = DType::I16;
      return true;
    case 26:
      *out = DType::I32;
      return true;
    case 27:
      *out = DType::I64;
      return true;
    case 28:
      *out = DType::F64;
      return true;
    case 30:
      *out = DType::BF16;
      return true;
    default:
      return false;
  }
}

// ---- GgufValue --------------------------------------------------------------------------

GgufValue GgufValue::u32(uint32_t v) {
  GgufValue x;
  x.type = GgufType::UINT32;
  x.u = v;
  return x;
}
GgufValue GgufValue::i32(int32_t v) {
  GgufValue x;
  x.type = GgufType::INT32;
  x.i = v;
  return x;
}
GgufValue GgufValue::u64(uint64_t v) {
  GgufValue x;
  x.type = GgufType::UINT64;
  x.u = v;
  return x;
}
GgufValue GgufValue::f32(float v) {
  GgufValue x;
  x.type = GgufType::FLOAT32;
  x.f = v;
  return x;
}
GgufValue GgufValue::boolean(bool v) {
  GgufValue x;
  x.type = GgufType::BOOL;
  x.u = v;
  return x;
}
GgufValue GgufValue::str(std::string v) {
  GgufValue x;
  x.type = GgufType::STRING;
  x.s = std::move(v);
  return x;
}
GgufValue GgufValue::array(GgufType elem, std::vector<GgufValue> items) {
  GgufValue x;
  x.type = GgufType::ARRAY;
  x.elem = elem;
  x.items = std::move(items);
  return x;
}
GgufValue GgufValue::strings(const std::vector<std::string>& v) {
  std::vector<GgufValue> items;
  items.reserve(v.size());
  for (const auto& s : v) items.push_back(str(s));
  return array(GgufType::STRING, std::move(items));
}
GgufValue GgufValue::f32s(const std::vector<float>& v) {
  std::vector<GgufValue> items;
  items.reserve(v.size());
  for (float f : v) items.push_back(f32(f));
  return array(GgufType::FLOAT32, std::move(items));
}
GgufValue GgufValue::i32s(const std::vector<int32_t>& v) {
  std::vector<GgufValue> items;
  items.reserve(v.size());
  for (int32_t i : v) items.push_back(i32(i));
  return array(GgufType::INT32, std::move(items));
}

bool GgufValue::is_int() const {
  switch (type) {
    case GgufType::UINT8:
    case GgufType::INT8:
    case GgufType::UINT16:
    case GgufType::INT16:
    case GgufType::UINT32:
    case GgufType::INT32:
    case GgufType::UINT64:
    case GgufType::INT64:
      return true;
    default:
      return false;
  }
}

bool GgufValue::operator==(const GgufValue& o) const {
  if (type != o.type) return false;
  switch (type) {
    case GgufType::STRING:
      return s == o.s;
    case GgufType::ARRAY:
      return elem == o.elem && items == o.items;
    case GgufType::FLOAT32:
    case GgufType::FLOAT64:
      return std::memcmp(&f, &o.f, sizeof f) == 0;  // bitwise: NaN round-trips too
    default:
      return u == o.u && i == o.i;
  }
}

// ---- GgufTensor -------------------------------------------------------------------------

int64_t GgufTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  return n;
}

std::string GgufTensor::shape_str() const {
  std::string s = "[";
  for (int64_t d : shape()) s += (s.size() > 1 ? ", " : "") + std::to_string(d);
  return s + "]";
}

TensorView GgufTensor::view() const {
  TensorView v;
  if (!ggml_plain_dtype(type, &v.dtype))
    fail("{}: tensor '{}' is {}, which is not an unquantized type", file, name,
         ggml_type_info(type).name);
  auto s = shape();
  v.ndim = static_cast<int>(s.size());
  for (size_t i = 0; i < s.size(); ++i) v.shape[i] = s[i];
  v.data = data;
  v.name = name;
  return v;
}

// ---- GgufFile ---------------------------------------------------------------------------

GgufFile::GgufFile(const std::string& path) : file_(path), path_(path) {
  parse(file_.data(), file_.size());
}

GgufFile::GgufFile(const char* data, size_t size, const std::string& name) : path_(name) {
  parse(data, size);
}

void GgufFile::parse(const char* data, size_t size) {
  const std::string& name = path_;
  Cursor c(data, size, name);
  if (size < 4) fail("{}: too small to be a GGUF file", name);
  uint32_t magic = c.read<uint32_t>("the magic");
  if (magic != k_magic) fail("{}: not a GGUF file (bad magic)", name);
  version_ = c.read<uint32_t>("the version");
  if (version_ == 1)
    fail("{}: GGUF v1 is not supported (v2 and v3 are); convert the model again", name);
  if (version_ != 2 && version_ != 3) {
    if ((version_ & 0xffff) == 0)
      fail("{}: a big-endian GGUF file; only little-endian files are supported", name);
    fail("{}: GGUF version {} is not supported (v2 and v3 are)", name, version_);
  }
  uint64_t n_tensors = c.read<uint64_t>("the tensor count");
  uint64_t n_kv = c.read<uint64_t>("the metadata count");
  // A key-value needs >= 8 (key) + 4 (type) + 1 bytes; a tensor info >= 8 + 4 + 4 + 8.
  if (n_kv > c.left() / 13)
    fail("{}: claims {} metadata entries, more than the file can hold (corrupt file)", name, n_kv);
  for (uint64_t k = 0; k < n_kv; ++k) {
    std::string key = c.string("a metadata key");
    GgufType t = c.value_type(key);
    GgufValue v = c.value(t, key, 0);
    if (!kv_.emplace(key, std::move(v)).second)
      fail("{}: metadata key '{}' appears twice (corrupt file)", name, key);
  }
  if (auto it = kv_.find("general.alignment"); it != kv_.end()) {
    const GgufValue& a = it->second;
    const int64_t v = a.i != 0 ? a.i : static_cast<int64_t>(a.u & 0x7fffffffffffffffull);
    if (!a.is_int() || v <= 0 || v > (1 << 30) || (v & (v - 1)) != 0)
      fail("{}: general.alignment must be a power of two up to 2^30 (got {})", name,
           a.is_int() ? std::to_string(v) : "a non-integer");
    alignment_ = static_cast<uint32_t>(v);
  }
  if (n_tensors > c.left() / 24)
    fail("{}: claims {} tensors, more than the file can hold (corrupt file)", name, n_tensors);
  std::vector<uint64_t> offsets;
  tensors_.reserve(n_tensors);
  offsets.reserve(n_tensors);
  for (uint64_t k = 0; k < n_tensors; ++k) {
    GgufTensor t;
    t.file = name;
    t.name = c.string("a tensor name");
    uint32_t nd = c.read<uint32_t>("a tensor's dimension count");
    if (nd == 0 || nd > k_max_dims)
      fail("{}: tensor '{}' has {} dimensions (1..{} supported)", name, t.name, nd, k_max_dims);
    int64_t numel = 1;
    for (uint32_t d = 0; d < nd; ++d) {
      uint64_t v = c.read<uint64_t>("a tensor dimension");
      if (v == 0 || v > (uint64_t(1) << 62) || !mul_ok(numel, static_cast<int64_t>(v), &numel))
        fail("{}: tensor '{}' has a bad or overflowing dimension {} (corrupt file)", name, t.name,
             v);
      t.ne.push_back(static_cast<int64_t>(v));
    }
    t.type = c.read<uint32_t>("a tensor type");
    GgmlTypeInfo ti = ggml_type_info(t.type);
    if (ti.block_bytes == 0)
      fail("{}: tensor '{}' has unknown ggml type {} (corrupt file or a newer format)", name,
           t.name, t.type);
    if (t.ne[0] % ti.block_elems != 0)
      fail("{}: tensor '{}' ({}) has rows of {} elements, not a multiple of the {}-element block",
           name, t.name, ti.name, t.ne[0], ti.block_elems);
    int64_t bytes = 0;
    if (!mul_ok(numel / ti.block_elems, ti.block_bytes, &bytes))
      fail("{}: tensor '{}' is too large (corrupt file)", name, t.name);
    t.nbytes = static_cast<size_t>(bytes);
    uint64_t off = c.read<uint64_t>("a tensor offset");
    if (off % alignment_ != 0)
      fail("{}: tensor '{}' offset {} is not a multiple of the alignment {} (corrupt file)", name,
           t.name, off, alignment_);
    offsets.push_back(off);
    tensors_.push_back(std::move(t));
  }
  size_t pos = c.pos();
  data_offset_ = (pos + alignment_ - 1) / alignment_ * alignment_;
  if (data_offset_ > size && !tensors_.empty())
    fail("{}: truncated before the tensor data; download the file again", name);
  const size_t data_size = data_offset_ <= size ? size - data_offset_ : 0;
  std::map<std::string_view, int> seen;
  for (size_t k = 0; k < tensors_.size(); ++k) {
    GgufTensor& t = tensors_[k];
    if (!seen.emplace(t.name, 0).second)
      fail("{}: tensor '{}' appears twice (corrupt file)", name, t.name);
    if (offsets[k] > data_size || t.nbytes > data_size - offsets[k])
      fail(
          "{}: tensor '{}' ({} bytes at data offset {}) lies past the end of the file ({} data "
          "bytes): the file is truncated; download it again",
          name, t.name, t.nbytes, offsets[k], data_size);
    t.data = data + data_offset_ + offsets[k];
  }
}

// ---- GgufSet ----------------------------------------------------------------------------

bool is_gguf_path(const std::string& path) {
  if (path.size() < 5) return false;
  std::string ext = path.substr(path.size() - 5);
  for (char& ch : ext) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return ext == ".gguf";
}

namespace {
// Finds "-NNNNN-of-MMMMM.gguf" at the end; returns the position of the first '-' or npos.
size_t split_suffix(const std::string& p, int* no, int* count) {
  // -00001-of-00003.gguf is 20 characters.
  if (p.size() < 20) return std::string::npos;
  size_t b = p.size() - 20;
  auto digits = [&](size_t at) {
    int v = 0;
    for (size_t i = at; i < at + 5; ++i) {
      if (!std::isdigit(static_cast<unsigned char>(p[i]))) return -1;
      v = v * 10 + (p[i] - '0');
    }
    return v;
  };
  if (p[b] != '-' || p.compare(b + 6, 4, "-of-") != 0 || !is_gguf_path(p)) return std::string::npos;
  int a = digits(b + 1), n = digits(b + 10);
  if (a < 1 || n < 1) return std::string::npos;
  *no = a;
  *count = n;
  return b;
}
}  // namespace

std::vector<std::string> gguf_split_paths(const std::string& first, int count) {
  int no = 0, n = 0;
  size_t b = split_suffix(first, &no, &n);
  if (b == std::string::npos) {
    if (count <= 1) return {first};
    fail(
        "{}: split.count is {} but the name is not <name>-00001-of-{:05d}.gguf; rename the "
        "parts as gguf-split wrote them",
        first, count, count);
  }
  if (count <= 0) count = n;
  std::vector<std::string> out;
  for (int k = 1; k <= count; ++k)
    out.push_back(fmt::format("{}-{:05d}-of-{:05d}.gguf", first.substr(0, b), k, count));
  return out;
}

std::unique_ptr<GgufSet> GgufSet::open(const std::string& path) {
  auto set = std::make_unique<GgufSet>();
  set->path_ = path;
  int no = 0, n = 0;
  std::string first = path;
  if (size_t b = split_suffix(path, &no, &n); b != std::string::npos && no != 1)
    first = fmt::format("{}-{:05d}-of-{:05d}.gguf", path.substr(0, b), 1, n);
  if (!file_exists(first)) fail("{} does not exist", first);
  set->files_.push_back(std::make_unique<GgufFile>(first));
  int count = static_cast<int>(set->get_int_or("split.count", n > 0 ? n : 1));
  if (count < 1 || count > 9999) fail("{}: split.count {} is out of range", first, count);
  std::vector<std::string> parts = gguf_split_paths(first, count);
  for (size_t k = 1; k < parts.size(); ++k) {
    if (!file_exists(parts[k]))
      fail("{}: split part {} of {} ({}) is missing; download every part", first, k + 1, count,
           parts[k]);
    set->files_.push_back(std::make_unique<GgufFile>(parts[k]));
    const auto& md = set->files_.back()->metadata();
    auto it = md.find("split.no");
    if (it != md.end() && it->second.is_int() && it->second.u + it->second.i != k)
      fail("{}: split.no is {} but the file name says {}", parts[k], it->second.u + it->second.i,
           k);
  }
  for (const auto& f : set->files_)
    for (const GgufTensor& t : f->tensors())
      if (!set->index_.emplace(t.name, &t).second)
        fail("{}: tensor '{}' appears in more than one split part", f->path(), t.name);
  if (const GgufValue* v = set->find("split.tensors.count");
      v && v->is_int() && v->u + static_cast<uint64_t>(v->i) != set->index_.size())
    fail("{}: split.tensors.count says {} tensors but the parts hold {}; a part is damaged", first,
         v->u + static_cast<uint64_t>(v->i), set->index_.size());
  return set;
}

const GgufValue* GgufSet::find(const std::string& key) const {
  const auto& md = metadata();
  auto it = md.find(key);
  return it == md.end() ? nullptr : &it->second;
}

namespace {
int64_t int_of(const GgufValue& v, const std::string& path, const std::string& key) {
  if (!v.is_int())
    fail("{}: metadata '{}' must be an integer (is {})", path, key, gguf_type_name(v.type));
  if (v.type == GgufType::UINT64 && v.u > static_cast<uint64_t>(INT64_MAX))
    fail("{}: metadata '{}' is out of range", path, key);
  return v.i != 0 ? v.i : static_cast<int64_t>(v.u);
}
double num_of(const GgufValue& v, const std::string& path, const std::string& key) {
  if (v.type == GgufType::FLOAT32 || v.type == GgufType::FLOAT64) return v.f;
  if (v.is_int()) return static_cast<double>(int_of(v, path, key));
  fail("{}: metadata '{}' must be a number (is {})", path, key, gguf_type_name(v.type));
}
}  // namespace

int64_t GgufSet::get_int(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) fail("{}: missing metadata '{}'", path_, key);
  return int_of(*v, path_, key);
}
int64_t GgufSet::get_int_or(const std::string& key, int64_t dflt) const {
  return has(key) ? get_int(key) : dflt;
}
double GgufSet::get_float(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) fail("{}: missing metadata '{}'", path_, key);
  return num_of(*v, path_, key);
}
double GgufSet::get_float_or(const std::string& key, double dflt) const {
  return has(key) ? get_float(key) : dflt;
}
bool GgufSet::get_bool_or(const std::string& key, bool dflt) const {
  const GgufValue* v = find(key);
  if (!v) return dflt;
  if (v->type != GgufType::BOOL) fail("{}: metadata '{}' must be a bool", path_, key);
  return v->u != 0;
}
std::string GgufSet::get_string(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) fail("{}: missing metadata '{}'", path_, key);
  if (v->type != GgufType::STRING) fail("{}: metadata '{}' must be a string", path_, key);
  return v->s;
}
std::string GgufSet::get_string_or(const std::string& key, const std::string& dflt) const {
  return has(key) ? get_string(key) : dflt;
}
std::vector<std::string> GgufSet::get_strings(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) fail("{}: missing metadata '{}'", path_, key);
  if (v->type != GgufType::ARRAY || v->elem != GgufType::STRING)
    fail("{}: metadata '{}' must be an array of strings", path_, key);
  std::vector<std::string> out;
  out.reserve(v->items.size());
  for (const auto& s : v->items) out.push_back(s.s);
  return out;
}
std::vector<double> GgufSet::get_numbers(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) fail("{}: missing metadata '{}'", path_, key);
  if (v->type != GgufType::ARRAY) fail("{}: metadata '{}' must be an array", path_, key);
  std::vector<double> out;
  out.reserve(v->items.size());
  for (const auto& x : v->items) out.push_back(num_of(x, path_, key));
  return out;
}

const GgufTensor* GgufSet::tensor(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second;
}

const GgufTensor& GgufSet::get_tensor(const std::string& name) const {
  const GgufTensor* t = tensor(name);
  if (!t) fail("{}: tensor '{}' is missing", path_, name);
  return *t;
}

std::vector<std::string> GgufSet::tensor_names() const {
  std::vector<std::string> out;
  for (const auto& [k, v] : index_) out.push_back(k);
  return out;
}

}  // namespace ft
