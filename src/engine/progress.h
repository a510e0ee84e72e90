// A progress bar on stderr for long start-up copies (experts into pinned host memory): redrawn
// in place on a terminal, at most every 10% as plain lines otherwise (logs, pipes).
#pragma once
#include <cstddef>
#include <string>

#include "base/timer.h"

namespace ft {

// "label [#########...........]  45%  3.20/7.10 GB  2.1 GB/s": width is the bar's cells.
std::string progress_line(const std::string& label, size_t done, size_t total, double seconds,
                          int width = 30);

class ProgressBar {
 public:
  // tty < 0: ask isatty(stderr).
  ProgressBar(std::string label, size_t total, int tty = -1);
  ~ProgressBar();  // finishes the line if update() reached the total, else clears it
  void update(size_t done);

 private:
  std::string label_;
  size_t total_, done_ = 0;
  bool tty_;
  int last_decile_ = -1;
  double last_draw_ = -1;
  Timer timer_;
};

}  // namespace ft
