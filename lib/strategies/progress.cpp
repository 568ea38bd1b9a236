// The progress bar and progress lines of a training run (progress.hpp).
#include "cnnbench/progress.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "cnnbench/core.hpp"

namespace cnnbench {

namespace {

constexpr double bar_redraw_seconds = 0.2;
constexpr double line_every_seconds = 5.0;

std::string format(const char* pattern, double a, double b = 0) {
  char text[96];
  std::snprintf(text, sizeof text, pattern, a, b);
  return text;
}

std::string steps_text(const ProgressState& s) {
  char text[64];
  std::snprintf(text, sizeof text, "step %lld/%lld", static_cast<long long>(s.step),
                static_cast<long long>(s.total));
  return text;
}

}  // namespace

ProgressMode parse_progress_mode(const std::string& name) {
  if (name == "bar") return ProgressMode::bar;
  if (name == "lines") return ProgressMode::lines;
  if (name == "none") return ProgressMode::none;
  fail("--progress " + name + ": expected bar, lines or none");
}

std::string progress_bar_line(const ProgressState& s, int columns) {
  const std::size_t limit = static_cast<std::size_t>(std::max(columns, 2) - 1);
  std::vector<std::string> parts = {steps_text(s), format("%.0f img/s", s.images_per_s),
                                    format("loss %.4f", s.loss), format("ETA %.0fs", s.eta_seconds)};
  // Leave out the ETA, then the speed, until the text and a bar of at least 10 fit.
  constexpr std::size_t min_bar = 10;
  auto text_of = [&] {
    std::string text;
    for (const auto& p : parts) text += (text.empty() ? "" : "  ") + p;
    return text;
  };
  std::string text = text_of();
  for (std::size_t drop : {3u, 1u}) {
    if (text.size() + 3 + min_bar <= limit) break;
    parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(drop));
    text = text_of();
  }
  if (text.size() + 3 + min_bar > limit) {
    // No room for a bar: the step and the loss, else the step alone, else its numbers alone.
    if (text.size() > limit && parts.size() > 1) {
      parts.erase(parts.begin() + 1);
      text = text_of();
    }
    if (text.size() > limit && text.starts_with("step ")) text.erase(0, 5);
    return text.substr(0, limit);
  }
  const std::size_t width = std::min<std::size_t>(limit - text.size() - 3, 50);
  const std::size_t filled =
      s.total > 0 ? static_cast<std::size_t>(static_cast<double>(width) * static_cast<double>(s.step) /
                                             static_cast<double>(s.total))
                  : width;
  return "[" + std::string(std::min(filled, width), '#') + std::string(width - std::min(filled, width), ' ') +
         "] " + text;
}

std::string progress_log_line(const ProgressState& s) {
  const double percent = s.total > 0 ? 100.0 * static_cast<double>(s.step) / static_cast<double>(s.total) : 100;
  return steps_text(s) + format(" (%.0f%%)", percent) + format("  %.0f img/s", s.images_per_s) +
         format("  loss %.4f", s.loss) + format("  ETA %.0fs", s.eta_seconds);
}

namespace {

// $COLUMNS as a width; nothing when unset or not a whole number >= 1.
std::optional<int> columns_from_environment() {
  const char* env = std::getenv("COLUMNS");
  if (env == nullptr || *env == 0) return std::nullopt;
  const std::string text = env;
  int columns = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), columns);
  if (error != std::errc() || end != text.data() + text.size() || columns < 1) return std::nullopt;
  return columns;
}

}  // namespace

std::string columns_environment_problem() {
  const char* env = std::getenv("COLUMNS");
  if (env == nullptr || *env == 0 || columns_from_environment()) return "";
  return std::string("COLUMNS=") + env + ": expected a whole number >= 1 (the terminal's width)";
}

int terminal_columns() {
  struct winsize size {};
  int columns = 80;
  if (::ioctl(STDERR_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 0) {
    columns = size.ws_col;
  } else if (const std::optional<int> env = columns_from_environment()) {
    columns = *env;
  }
  return std::min(columns, 200);
}

// A terminal too narrow for a bar gets the lines a log gets.
ProgressReporter::ProgressReporter(ProgressMode mode, std::int64_t total, int batch)
    : mode_(mode == ProgressMode::bar && terminal_columns() < min_bar_columns ? ProgressMode::lines
                                                                              : mode),
      total_(total),
      batch_(batch),
      start_(now_seconds()),
      last_(start_) {}

ProgressReporter::~ProgressReporter() {
  if (drawn_ > 0) std::fputc('\n', stderr);
}

void ProgressReporter::update(std::int64_t step, double loss, std::int64_t steps_this_run) {
  if (mode_ == ProgressMode::none) return;
  const double now = now_seconds();
  const double every = mode_ == ProgressMode::bar ? bar_redraw_seconds : line_every_seconds;
  if (now - last_ < every && step != total_) return;
  last_ = now;
  const double elapsed = now - start_;
  ProgressState s;
  s.step = step;
  s.total = total_;
  s.loss = loss;
  s.images_per_s = elapsed > 0 ? static_cast<double>(steps_this_run) * batch_ / elapsed : 0;
  s.eta_seconds = s.images_per_s > 0 ? static_cast<double>(total_ - step) * batch_ / s.images_per_s : 0;
  if (mode_ == ProgressMode::lines) {
    std::fprintf(stderr, "%s\n", progress_log_line(s).c_str());
    return;
  }
  const int columns = terminal_columns();
  std::string line = progress_bar_line(s, columns);
  // Spaces over what is left of a longer line before, within the width (the terminal may have
  // narrowed since).
  const std::size_t shown = line.size();
  const std::size_t cover = std::min(drawn_, static_cast<std::size_t>(columns - 1));
  if (shown < cover) line.append(cover - shown, ' ');
  std::fprintf(stderr, "\r%s", line.c_str());
  std::fflush(stderr);
  drawn_ = std::max<std::size_t>(shown, 1);
}

}  // namespace cnnbench
