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

// An integer knob: the value of `name`, or fallback when it is unset or not a whole number.
inline long long env_int(const char* name, long long fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const long long x = std::strtoll(v, &end, 10);
  return *end ? fallback : x;
}

}  // namespace ft
