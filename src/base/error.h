// Two-tier errors: FT_CHECK aborts on broken invariants; ft::Error carries user/file errors
// up to the CLI or HTTP boundary, where they become a one-line message or a 4xx.
#pragma once
#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace ft {

// A recoverable error: bad input, a bad file, an unsupported model. The message names the fix.
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// An allocation that did not fit (device or host memory): the engine fails the step's requests,
// shrinks its caches and goes on.
struct OutOfMemory : Error {
  using Error::Error;
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

[[noreturn]] inline void check_failed(const char* file, int line, const char* expr,
                                      const std::string& msg) {
  std::fprintf(stderr, "%s:%d: check failed: %s %s\n", file, line, expr, msg.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace ft

// Invariant check: aborts with file:line, the expression and a formatted message.
#define FT_CHECK(cond, ...)                                                          \
  do {                                                                               \
    if (!(cond)) [[unlikely]]                                                        \
      ::ft::check_failed(__FILE__, __LINE__, #cond, ::fmt::format("" __VA_ARGS__)); \
  } while (0)
