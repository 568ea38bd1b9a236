// The progress of a training run on stderr: a bar redrawn in place on a terminal, or a line every
// few seconds for logs and mpirun (whose ranks write to pipes, not terminals).
#pragma once

#include <cstdint>
#include <string>

namespace cnnbench {

enum class ProgressMode { none, bar, lines };

// "bar", "lines" or "none"; Error on anything else.
ProgressMode parse_progress_mode(const std::string& name);

struct ProgressState {
  std::int64_t step = 0, total = 0;
  double images_per_s = 0, loss = 0, eta_seconds = 0;
};

// The bar's line for a terminal `columns` wide, at most columns - 1 characters (a line as wide as
// the terminal wraps on some terminals, and every redraw then scrolls). Parts are left out, the
// ETA first, then the speed, then the bar, where they do not fit.
std::string progress_bar_line(const ProgressState& state, int columns);
// One line for logs: "step 200/1000 (20%)  41234 img/s  loss 0.1234  ETA 12s".
std::string progress_log_line(const ProgressState& state);

// The width of the terminal on stderr (TIOCGWINSZ), else $COLUMNS, else 80; at most 200.
int terminal_columns();
// The narrowest terminal a bar is drawn on; a narrower one gets progress lines instead.
constexpr int min_bar_columns = 20;
// "" when $COLUMNS is unset or a whole number >= 1, else what is wrong with it, naming the
// variable (the CLI refuses it as it would a bad flag, when it would draw a bar by it).
std::string columns_environment_problem();

class ProgressReporter {
 public:
  ProgressReporter(ProgressMode mode, std::int64_t total, int batch);
  ~ProgressReporter();
  ProgressReporter(const ProgressReporter&) = delete;
  ProgressReporter& operator=(const ProgressReporter&) = delete;
  void update(std::int64_t step, double loss, std::int64_t steps_this_run);

 private:
  ProgressMode mode_;
  std::int64_t total_;
  int batch_;
  double start_;
  double last_ = 0;
  std::size_t drawn_ = 0;  // length of the bar's line on screen, 0 = none
};

}  // namespace cnnbench
