// safetensors writer: JSON header padded to 8 bytes, then the tensors back to back.
#include "io/safetensors_writer.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/error.h"

namespace ft {

void write_safetensors(const std::string& path, const std::vector<TensorView>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<const TensorView*> order;
  for (const auto& t : tensors) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->name < b->name; });
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  size_t offset = 0;
  for (const TensorView* t : order) {
    std::vector<int64_t> shape(t->shape.begin(), t->shape.begin() + t->ndim);
    header[t->name] = {{"dtype", dtype_name(t->dtype)}, {"shape", shape},
                       {"data_offsets", {offset, offset + t->nbytes()}}};
    offset += t->nbytes();
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');
  std::ofstream f(path, std::ios::binary);
  if (!f) fail("cannot write {}: {}", path, std::strerror(errno));
  const uint64_t n = h.size();
  f.write(reinterpret_cast<const char*>(&n), 8);
  f.write(h.data(), static_cast<std::streamsize>(h.size()));
  for (const TensorView* t : order)
    f.write(static_cast<const char*>(t->data), static_cast<std::streamsize>(t->nbytes()));
  if (!f) fail("cannot write {}: {}", path, std::strerror(errno));
}

}  // namespace ft
