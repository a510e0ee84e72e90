// Logging implementation: one line per message, prefixed with the level.
#include "base/log.h"

#include <cstdlib>
#include <cstring>
#include <mutex>

namespace ft {

LogLevel log_level() {
  static const LogLevel level = [] {
    const char* s = std::getenv("FT_LOG_LEVEL");
    if (!s) return LogLevel::INFO;
    if (!std::strcmp(s, "debug")) return LogLevel::DEBUG;
    if (!std::strcmp(s, "warn")) return LogLevel::WARN;
    if (!std::strcmp(s, "error")) return LogLevel::ERROR;
    return LogLevel::INFO;
  }();
  return level;
}

void log_write(LogLevel level, const std::string& msg) {
  static std::mutex mu;
  static const char* names[] = {"debug", "info", "warn", "error"};
  std::lock_guard lock(mu);
  std::fprintf(stderr, "[ft %s] %s\n", names[static_cast<int>(level)], msg.c_str());
}

}  // namespace ft
