// GGUF writer (v3, little-endian): metadata in insertion order, tensor data streamed from
// callbacks (so `ft quantize` never holds a whole model), optional split into N parts.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "io/gguf.h"

namespace ft {

class GgufWriter {
 public:
  // Fills dst[0, nbytes) with the tensor's data in its ggml type.
  using Fill = std::function<void(char* dst)>;

  // Sets a metadata key (replacing an earlier value, keeping its position).
  void set(const std::string& key, GgufValue v);
  // A tensor of ggml type `type` and row-major shape (outermost first, 1..4 dims). The data is
  // produced by fill when written. Throws ft::Error if the shape does not fit the type's block.
  void add_tensor(const std::string& name, uint32_t type, const std::vector<int64_t>& shape,
                  Fill fill);
  // A tensor whose bytes are copied from data (which must hold the whole tensor).
  void add_tensor(const std::string& name, uint32_t type, const std::vector<int64_t>& shape,
                  const void* data);

  // Writes `path`, or with n_split > 1 the parts <stem>-00001-of-0000N.gguf (tensors divided
  // in order by bytes; split.no/split.count/split.tensors.count in every part, the other
  // metadata in the first). progress(done_bytes, total_bytes) is called after each tensor.
  // Returns the files written. Throws ft::Error on I/O failure.
  std::vector<std::string> write(const std::string& path, int n_split = 1,
                                 const std::function<void(size_t, size_t)>& progress = {}) const;

  size_t n_tensors() const { return tensors_.size(); }
  size_t data_bytes() const;
  uint32_t alignment = 32;

 private:
  struct Tensor {
    std::string name;
    uint32_t type;
    std::vector<int64_t> ne;  // GGUF order
    size_t nbytes;
    Fill fill;
  };
  void write_part(const std::string& path, const std::vector<std::pair<std::string, GgufValue>>& kv,
                  size_t t0, size_t t1, size_t* done, size_t total,
                  const std::function<void(size_t, size_t)>& progress) const;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::vector<Tensor> tensors_;
};

// Serialises one metadata value (type tag not included) in GGUF's encoding (tests, fuzzing).
void gguf_encode_value(std::string& out, const GgufValue& v);

}  // namespace ft
