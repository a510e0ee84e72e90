// Minimal leveled logging to stderr. FT_LOG_LEVEL=debug|info|warn|error selects the threshold.
#pragma once
#include <fmt/format.h>

#include <cstdio>

namespace ft {

enum class LogLevel { DEBUG = 0, INFO = 1, WARN = 2, ERROR = 3 };

LogLevel log_level();
void log_write(LogLevel level, const std::string& msg);

template <typename... Args>
void log(LogLevel level, fmt::format_string<Args...> f, Args&&... args) {
  if (level < log_level()) return;
  log_write(level, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace ft

#define FT_LOG_INFO(...) ::ft::log(::ft::LogLevel::INFO, __VA_ARGS__)
#define FT_LOG_WARN(...) ::ft::log(::ft::LogLevel::WARN, __VA_ARGS__)
#define FT_LOG_DEBUG(...) ::ft::log(::ft::LogLevel::DEBUG, __VA_ARGS__)
