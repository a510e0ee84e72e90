// Writes a .safetensors file from named tensors (converters, test-model makers).
#pragma once
#include <map>
#include <string>
#include <vector>

#include "base/tensor.h"

namespace ft {

// Each view's bytes are written as-is, in name order, 8-byte aligned. Throws ft::Error on I/O
// failure.
void write_safetensors(const std::string& path, const std::vector<TensorView>& tensors,
                       const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

}  // namespace ft
