// Large sequential file reads into page-aligned host memory: O_DIRECT (no page-cache copy) in
// big chunks on a few threads, falling back to buffered reads where O_DIRECT is refused (tmpfs).
#pragma once
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

namespace ft {

// An anonymous page-aligned mapping (4 KiB aligned: usable for O_DIRECT, and registrable as
// pinned memory by a device backend). Freed with the last owner.
class HostBuffer {
 public:
  explicit HostBuffer(size_t bytes);  // ft::Error when the memory cannot be mapped
  ~HostBuffer();
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  char* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  char* data_ = nullptr;
  size_t size_ = 0;
};

struct DirectReadStats {
  size_t bytes = 0;
  double seconds = 0;
  bool direct = false;  // O_DIRECT was used (else buffered reads)
  double gb_per_s() const { return seconds > 0 ? static_cast<double>(bytes) / seconds / 1e9 : 0; }
};

// Reads bytes [0, n) of path into dst (4 KiB aligned; n is rounded up to 4 KiB for the reads,
// dst must have room). chunk bytes per read, `threads` reads in flight; progress(done) is called
// from the calling thread as reads complete. ft::Error naming the file on failure or a short file.
DirectReadStats read_file_direct(const std::string& path, char* dst, size_t n,
                                 const std::function<void(size_t)>& progress = {}, int threads = 4,
                                 size_t chunk = size_t{32} << 20);

}  // namespace ft
