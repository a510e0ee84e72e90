// ProgressBar: TTY-aware start-up progress on stderr.
#include "engine/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace ft {

std::string progress_line(const std::string& label, size_t done, size_t total, double seconds,
                          int width) {
  const double f = total ? std::min(1.0, double(done) / double(total)) : 1.0;
  const int cells = static_cast<int>(f * width + 1e-9);
  return fmt::format("{} [{}{}] {:3.0f}%  {:.2f}/{:.2f} GB  {:.1f} GB/s", label,
                     std::string(cells, '#'), std::string(width - cells, '.'), 100 * f,
                     done / 1e9, total / 1e9, seconds > 0 ? done / 1e9 / seconds : 0.0);
}

ProgressBar::ProgressBar(std::string label, size_t total, int tty)
    : label_(std::move(label)), total_(total), tty_(tty < 0 ? ::isatty(2) == 1 : tty == 1) {
  update(0);
}

ProgressBar::~ProgressBar() {
  if (tty_) std::fprintf(stderr, done_ >= total_ ? "\n" : "\r\033[K");
  std::fflush(stderr);
}

void ProgressBar::update(size_t done) {
  done_ = std::min(done, total_);
  const double t = timer_.seconds();
  if (tty_) {  // redraw in place, at most 20 times a second
    if (done_ < total_ && last_draw_ >= 0 && t - last_draw_ < 0.05) return;
    last_draw_ = t;
    std::fprintf(stderr, "\r%s", progress_line(label_, done_, total_, t).c_str());
  } else {
    const int decile = total_ ? static_cast<int>(10 * done_ / total_) : 10;
    if (decile == last_decile_) return;
    last_decile_ = decile;
    std::fprintf(stderr, "%s\n", progress_line(label_, done_, total_, t).c_str());
  }
  std::fflush(stderr);
}

}  // namespace ft
