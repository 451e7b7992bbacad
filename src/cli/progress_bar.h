// A progress bar with an ETA on stderr, shown only when stderr is a terminal
// (quiet when piped or redirected). Thread-safe: the store calls progress
// callbacks from its worker threads.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

#include "trainsnap/store.h"

namespace trainsnap::cli {

class ProgressBar {
 public:
  // `bytes`: units are bytes (rendered with HumanBytes), else plain counts.
  ProgressBar(std::string label, bool bytes);
  ~ProgressBar();  // Finish()
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  // Redraws at most ~10 times a second, and always at done == total.
  void Update(uint64_t done, uint64_t total);
  // Erases the bar (the terminal line is left clean for the command's output).
  void Finish();
  // A callback for the Store's long operations. Valid while *this lives.
  ProgressFn Callback();
  bool enabled() const { return enabled_; }

 private:
  void Draw(uint64_t done, uint64_t total);  // mu_ held

  std::string label_;
  bool bytes_;
  bool enabled_;
  bool drawn_ = false;
  std::mutex mu_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
};

}  // namespace trainsnap::cli
