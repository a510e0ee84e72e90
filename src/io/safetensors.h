// safetensors reader: mmapped files, zero-copy TensorViews, sharded checkpoints via the index.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/tensor.h"
#include "io/mmap.h"

namespace ft {

// One .safetensors file: header parsed and validated at open (offsets, sizes, dtypes).
class SafetensorsFile {
 public:
  // Throws ft::Error naming the file for truncation, bad header or bad tensor entries.
  explicit SafetensorsFile(const std::string& path);
  const std::map<std::string, TensorView>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& path() const { return file_.path(); }

 private:
  MappedFile file_;
  std::map<std::string, TensorView> tensors_;
  std::map<std::string, std::string> metadata_;
};

// All weights of a checkpoint directory: model.safetensors, the shards named by
// model.safetensors.index.json, or every *.safetensors file in the directory.
class SafetensorsSet {
 public:
  static SafetensorsSet open_dir(const std::string& dir);
  static SafetensorsSet open_file(const std::string& path);

  bool has(const std::string& name) const { return index_.count(name) != 0; }
  // Throws ft::Error naming the checkpoint if missing.
  const TensorView& get(const std::string& name) const;
  const TensorView* find(const std::string& name) const;
  std::vector<std::string> names() const;
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorView*> index_;
  void add_file(const std::string& path);
};

}  // namespace ft
