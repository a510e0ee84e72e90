// GGUF writing: header + metadata + tensor infos, then each tensor's bytes padded to the
// alignment; split parts carry the split.* keys that readers use to find their siblings.
#include "io/gguf_writer.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "base/error.h"

namespace ft {

namespace {
template <typename T>
void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}
void put_string(std::string& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out += s;
}
size_t pad(size_t n, size_t a) { return (n + a - 1) / a * a; }
}  // namespace

void gguf_encode_value(std::string& out, const GgufValue& v) {
  switch (v.type) {
    case GgufType::UINT8:
      put<uint8_t>(out, static_cast<uint8_t>(v.u));
      break;
    case GgufType::INT8:
      put<int8_t>(out, static_cast<int8_t>(v.i));
      break;
    case GgufType::UINT16:
      put<uint16_t>(out, static_cast<uint16_t>(v.u));
      break;
    case GgufType::INT16:
      put<int16_t>(out, static_cast<int16_t>(v.i));
      break;
    case GgufType::UINT32:
      put<uint32_t>(out, static_cast<uint32_t>(v.u));
      break;
    case GgufType::INT32:
      put<int32_t>(out, static_cast<int32_t>(v.i));
      break;
    case GgufType::UINT64:
      put<uint64_t>(out, v.u);
      break;
    case GgufType::INT64:
      put<int64_t>(out, v.i);
      break;
    case GgufType::FLOAT32:
      put<float>(out, static_cast<float>(v.f));
      break;
    case GgufType::FLOAT64:
      put<double>(out, v.f);
      break;
    case GgufType::BOOL:
      put<uint8_t>(out, v.u ? 1 : 0);
      break;
    case GgufType::STRING:
      put_string(out, v.s);
      break;
    case GgufType::ARRAY:
      put<uint32_t>(out, static_cast<uint32_t>(v.elem));
      put<uint64_t>(out, v.items.size());
      for (const auto& x : v.items) {
        FT_CHECK(x.type == v.elem, "array item type {} in an array of {}", gguf_type_name(x.type),
                 gguf_type_name(v.elem));
        gguf_encode_value(out, x);
      }
      break;
  }
}

void GgufWriter::set(const std::string& key, GgufValue v) {
  for (auto& [k, old] : kv_)
    if (k == key) {
      old = std::move(v);
      return;
    }
  kv_.emplace_back(key, std::move(v));
}

void GgufWriter::add_tensor(const std::string& name, uint32_t type,
                            const std::vector<int64_t>& shape, Fill fill) {
  GgmlTypeInfo ti = ggml_type_info(type);
  if (ti.block_bytes == 0) fail("GGUF writer: unknown ggml type {} for '{}'", type, name);
  if (shape.empty() || shape.size() > 4)
    fail("GGUF writer: tensor '{}' has {} dims (1..4)", name, shape.size());
  Tensor t{.name = name,
           .type = type,
           .ne = {shape.rbegin(), shape.rend()},
           .nbytes = 0,
           .fill = std::move(fill)};
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d <= 0) fail("GGUF writer: tensor '{}' has a non-positive dimension", name);
    n *= d;
  }
  if (t.ne[0] % ti.block_elems != 0)
    fail("GGUF writer: tensor '{}' rows of {} are not a multiple of the {} block ({})", name,
         t.ne[0], ti.name, ti.block_elems);
  t.nbytes = static_cast<size_t>(n / ti.block_elems * ti.block_bytes);
  for (const Tensor& o : tensors_)
    if (o.name == name) fail("GGUF writer: tensor '{}' added twice", name);
  tensors_.push_back(std::move(t));
}

void GgufWriter::add_tensor(const std::string& name, uint32_t type,
                            const std::vector<int64_t>& shape, const void* data) {
  add_tensor(name, type, shape, Fill{});
  const size_t n = tensors_.back().nbytes;
  tensors_.back().fill = [data, n](char* dst) { std::memcpy(dst, data, n); };
}

size_t GgufWriter::data_bytes() const {
  size_t n = 0;
  for (const Tensor& t : tensors_) n += t.nbytes;
  return n;
}

void GgufWriter::write_part(const std::string& path,
                            const std::vector<std::pair<std::string, GgufValue>>& kv, size_t t0,
                            size_t t1, size_t* done, size_t total,
                            const std::function<void(size_t, size_t)>& progress) const {
  std::string h;
  put<uint32_t>(h, 0x46554747);
  put<uint32_t>(h, 3);
  put<uint64_t>(h, t1 - t0);
  put<uint64_t>(h, kv.size());
  for (const auto& [k, v] : kv) {
    put_string(h, k);
    put<uint32_t>(h, static_cast<uint32_t>(v.type));
    gguf_encode_value(h, v);
  }
  size_t offset = 0;
  for (size_t i = t0; i < t1; ++i) {
    const Tensor& t = tensors_[i];
    put_string(h, t.name);
    put<uint32_t>(h, static_cast<uint32_t>(t.ne.size()));
    for (int64_t d : t.ne) put<uint64_t>(h, static_cast<uint64_t>(d));
    put<uint32_t>(h, t.type);
    put<uint64_t>(h, offset);
    offset += pad(t.nbytes, alignment);
  }
  h.resize(pad(h.size(), alignment), '\0');
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) fail("cannot write {}: {}", path, std::strerror(errno));
  f.write(h.data(), static_cast<std::streamsize>(h.size()));
  std::vector<char> buf;
  for (size_t i = t0; i < t1; ++i) {
    const Tensor& t = tensors_[i];
    buf.assign(pad(t.nbytes, alignment), '\0');
    t.fill(buf.data());
    f.write(buf.data(), static_cast<std::streamsize>(buf.size()));
    if (!f) fail("cannot write {}: {}", path, std::strerror(errno));
    *done += t.nbytes;
    if (progress) progress(*done, total);
  }
  f.close();
  if (!f) fail("cannot write {}: {}", path, std::strerror(errno));
}

std::vector<std::string> GgufWriter::write(
    const std::string& path, int n_split,
    const std::function<void(size_t, size_t)>& progress) const {
  FT_CHECK(alignment > 0 && (alignment & (alignment - 1)) == 0, "alignment {}", alignment);
  if (n_split < 1 || n_split > 9999) fail("GGUF writer: split count {} out of range", n_split);
  if (n_split > 1 && static_cast<size_t>(n_split) > tensors_.size())
    fail("GGUF writer: cannot split {} tensors into {} parts", tensors_.size(), n_split);
  const size_t total = data_bytes();
  size_t done = 0;
  std::vector<std::pair<std::string, GgufValue>> kv = kv_;
  auto set_kv = [](std::vector<std::pair<std::string, GgufValue>>& m, const std::string& k,
                   GgufValue v) {
    for (auto& [key, old] : m)
      if (key == k) {
        old = std::move(v);
        return;
      }
    m.emplace_back(k, std::move(v));
  };
  if (alignment != 32) set_kv(kv, "general.alignment", GgufValue::u32(alignment));
  if (n_split == 1) {
    write_part(path, kv, 0, tensors_.size(), &done, total, progress);
    return {path};
  }
  std::string stem = path;
  if (is_gguf_path(stem)) stem.resize(stem.size() - 5);
  // Cut points: part k ends at the first tensor where the running bytes reach k/n of the total,
  // leaving at least one tensor for every later part.
  std::vector<size_t> ends;
  size_t acc = 0, i = 0;
  for (int k = 1; k < n_split; ++k) {
    const size_t target = total / n_split * k;
    do acc += tensors_[i++].nbytes;
    while (acc < target && tensors_.size() - i > static_cast<size_t>(n_split - k));
    ends.push_back(i);
  }
  ends.push_back(tensors_.size());
  std::vector<std::string> files;
  size_t t0 = 0;
  for (int k = 0; k < n_split; ++k) {
    std::vector<std::pair<std::string, GgufValue>> part_kv;
    if (k == 0) part_kv = kv;
    GgufValue no;
    no.type = GgufType::UINT16;
    no.u = static_cast<uint64_t>(k);
    GgufValue count = no;
    count.u = static_cast<uint64_t>(n_split);
    set_kv(part_kv, "split.no", no);
    set_kv(part_kv, "split.count", count);
    set_kv(part_kv, "split.tensors.count", GgufValue::i32(static_cast<int32_t>(tensors_.size())));
    if (k > 0 && alignment != 32) set_kv(part_kv, "general.alignment", GgufValue::u32(alignment));
    files.push_back(fmt::format("{}-{:05d}-of-{:05d}.gguf", stem, k + 1, n_split));
    write_part(files.back(), part_kv, t0, ends[k], &done, total, progress);
    t0 = ends[k];
  }
  return files;
}

}  // namespace ft
