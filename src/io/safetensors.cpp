// safetensors: 8-byte little-endian header length, JSON header, then the tensor bytes.
#include "io/safetensors.h"

#include <dirent.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "base/error.h"

namespace ft {

namespace {
constexpr uint64_t k_max_header = 100ull << 20;  // the format's own limit is 100 MB

TensorView parse_entry(const std::string& path, const std::string& name,
                       const nlohmann::json& e, const char* base, size_t data_size) {
  if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") ||
      !e.contains("data_offsets"))
    fail("{}: tensor '{}' has a malformed header entry", path, name);
  TensorView v;
  v.name = name;
  const std::string dt = e["dtype"].get<std::string>();
  if (!dtype_from_safetensors(dt, &v.dtype))
    fail("{}: tensor '{}' has unsupported dtype {}", path, name, dt);
  const auto& shape = e["shape"];
  if (!shape.is_array() || shape.size() > 4)
    fail("{}: tensor '{}' has a shape of rank {} (at most 4 supported)", path, name,
         shape.size());
  v.ndim = static_cast<int>(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) {
    if (!shape[i].is_number_integer() || shape[i].get<int64_t>() < 0)
      fail("{}: tensor '{}' has a bad shape", path, name);
    v.shape[i] = shape[i].get<int64_t>();
  }
  const auto& off = e["data_offsets"];
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
      !off[1].is_number_unsigned())
    fail("{}: tensor '{}' has bad data_offsets", path, name);
  uint64_t b = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
  if (b > end || end > data_size)
    fail("{}: tensor '{}' lies past the end of the file (offsets {}..{}, data {} bytes): "
         "the file is truncated; download it again", path, name, b, end, data_size);
  if (end - b != v.nbytes())
    fail("{}: tensor '{}' {} {} needs {} bytes but has {}", path, name, dt, v.shape_str(),
         v.nbytes(), end - b);
  v.data = base + b;
  return v;
}
}  // namespace

SafetensorsFile::SafetensorsFile(const std::string& path) : file_(path) {
  if (file_.size() < 8) fail("{}: too small to be a safetensors file (truncated?)", path);
  uint64_t n = 0;
  std::memcpy(&n, file_.data(), 8);
  if (n > k_max_header || n + 8 > file_.size())
    fail("{}: header length {} exceeds the file size {} (truncated or not safetensors)", path,
         n, file_.size());
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(file_.data() + 8, file_.data() + 8 + n);
  } catch (const std::exception& e) {
    fail("{}: the safetensors header is not valid JSON ({})", path, e.what());
  }
  if (!header.is_object()) fail("{}: the safetensors header is not a JSON object", path);
  const char* base = file_.data() + 8 + n;
  size_t data_size = file_.size() - 8 - n;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (it->is_object())
        for (auto m = it->begin(); m != it->end(); ++m)
          if (m->is_string()) metadata_[m.key()] = m->get<std::string>();
      continue;
    }
    tensors_.emplace(it.key(), parse_entry(path, it.key(), *it, base, data_size));
  }
}

void SafetensorsSet::add_file(const std::string& path) {
  files_.push_back(std::make_unique<SafetensorsFile>(path));
  for (const auto& [name, view] : files_.back()->tensors()) index_[name] = &view;
}

SafetensorsSet SafetensorsSet::open_file(const std::string& path) {
  SafetensorsSet s;
  s.dir_ = path;
  s.add_file(path);
  return s;
}

SafetensorsSet SafetensorsSet::open_dir(const std::string& dir) {
  SafetensorsSet s;
  s.dir_ = dir;
  const std::string index = dir + "/model.safetensors.index.json";
  if (file_exists(index)) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(read_file(index));
    } catch (const nlohmann::json::exception& e) {
      fail("{}: not valid JSON ({})", index, e.what());
    }
    if (!j.contains("weight_map") || !j["weight_map"].is_object())
      fail("{}: has no weight_map object", index);
    std::vector<std::string> shards;
    for (const auto& v : j["weight_map"]) {
      if (!v.is_string()) fail("{}: weight_map values must be file names", index);
      std::string f = v.get<std::string>();
      if (f.find('/') != std::string::npos || f.find("..") != std::string::npos)
        fail("{}: shard name '{}' must be a plain file name", index, f);
      if (std::find(shards.begin(), shards.end(), f) == shards.end()) shards.push_back(f);
    }
    for (const auto& f : shards) {
      if (!file_exists(dir + "/" + f))
        fail("{}: shard {} is missing; download the whole checkpoint", dir, f);
      s.add_file(dir + "/" + f);
    }
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it)
      if (!s.has(it.key()))
        fail("{}: tensor '{}' is listed in the index but absent from {}", dir, it.key(),
             it->get<std::string>());
    return s;
  }
  if (file_exists(dir + "/model.safetensors")) {
    s.add_file(dir + "/model.safetensors");
    return s;
  }
  std::vector<std::string> found;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n.size() > 12 && n.substr(n.size() - 12) == ".safetensors") found.push_back(n);
    }
    ::closedir(d);
  } else {
    fail("model directory {} does not exist", dir);
  }
  if (found.empty())
    fail("{} holds no .safetensors weights (expected model.safetensors or "
         "model.safetensors.index.json)", dir);
  std::sort(found.begin(), found.end());
  for (const auto& f : found) s.add_file(dir + "/" + f);
  return s;
}

const TensorView* SafetensorsSet::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second;
}

const TensorView& SafetensorsSet::get(const std::string& name) const {
  const TensorView* v = find(name);
  if (!v) fail("{}: tensor '{}' is missing from the checkpoint", dir_, name);
  return *v;
}

std::vector<std::string> SafetensorsSet::names() const {
  std::vector<std::string> out;
  for (const auto& [k, v] : index_) out.push_back(k);
  return out;
}

}  // namespace ft
