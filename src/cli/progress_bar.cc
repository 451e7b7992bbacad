#include "cli/progress_bar.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "cli/human_format.h"

namespace trainsnap::cli {

namespace {
constexpr int kBarWidth = 30;
constexpr auto kRedrawInterval = std::chrono::milliseconds(100);
}  // namespace

ProgressBar::ProgressBar(std::string label, bool bytes)
    : label_(std::move(label)),
      bytes_(bytes),
      enabled_(isatty(STDERR_FILENO) == 1),
      start_(std::chrono::steady_clock::now()) {}

ProgressBar::~ProgressBar() { Finish(); }

void ProgressBar::Update(uint64_t done, uint64_t total) {
  if (!enabled_) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto now = std::chrono::steady_clock::now();
  if (drawn_ && done < total && now - last_draw_ < kRedrawInterval) return;
  last_draw_ = now;
  Draw(done, total);
}

void ProgressBar::Draw(uint64_t done, uint64_t total) {
  double fraction = total == 0 ? 1.0 : std::min(1.0, static_cast<double>(done) / static_cast<double>(total));
  int filled = static_cast<int>(fraction * kBarWidth);
  std::string bar(static_cast<size_t>(filled), '#');
  bar.append(static_cast<size_t>(kBarWidth - filled), '.');
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  // Linear extrapolation from the rate so far; unknown until some work is done.
  std::string eta = done == 0 ? "?" : HumanDuration(elapsed * (1.0 - fraction) / std::max(fraction, 1e-9));
  std::string amounts = bytes_ ? HumanBytes(done) + " / " + HumanBytes(total)
                               : std::to_string(done) + " / " + std::to_string(total);
  // \r + erase-line (ANSI "\033[K") redraws in place.
  std::fprintf(stderr, "\r\033[K%s [%s] %3d%%  %s  ETA %s", label_.c_str(), bar.c_str(),
               static_cast<int>(fraction * 100.0), amounts.c_str(), eta.c_str());
  std::fflush(stderr);
  drawn_ = true;
}

void ProgressBar::Finish() {
  if (!enabled_) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (drawn_) {
    std::fprintf(stderr, "\r\033[K");
    std::fflush(stderr);
    drawn_ = false;
  }
}

ProgressFn ProgressBar::Callback() {
  if (!enabled_) return {};
  return [this](uint64_t done, uint64_t total) { Update(done, total); };
}

}  // namespace trainsnap::cli
