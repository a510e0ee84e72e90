// Read-only memory-mapped file (RAII). The mapping lives as long as the object.
#pragma once
#include <cstddef>
#include <string>

namespace ft {

class MappedFile {
 public:
  MappedFile() = default;
  // Throws ft::Error naming the path if it cannot be opened or mapped.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const char* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const char* data_ = nullptr;
  size_t size_ = 0;
};

// Reads a whole (small) file into a string; throws ft::Error if missing.
std::string read_file(const std::string& path);
bool file_exists(const std::string& path);

}  // namespace ft
