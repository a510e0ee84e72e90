// Environment switches for A/B runs (FT_MOE_STREAM=0, FT_CUDA_PDL=0, ...): each names a path
// that is on by default and documents its variable where it is read.
#pragma once
#include <cstdlib>
#include <cstring>

namespace ft {

// A default-on path's switch: false only when the variable `name` is set to "0".
inline bool env_on(const char* name) {
  const char* v = std::getenv(name);
  return !v || std::strcmp(v, "0") != 0;
}

}  // namespace ft
