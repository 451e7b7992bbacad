// In-process stand-ins for the tool's terminal: file descriptors (stdin,
// stderr) swapped for a pseudo-terminal or another file for one test, and
// given back on destruction. For the units that ask isatty() (confirm,
// progress_bar); RunCliOnTerminal (cli_fixture.h) covers the whole binary.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <termios.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <iostream>
#include <string>
#include <vector>

namespace trainsnap::cli_test {

// Points `target` at `replacement` (dup'ed) until destruction.
class ScopedFd {
 public:
  ScopedFd(int target, int replacement) : target_(target), saved_(dup(target)) {
    std::fflush(stdout);  // what was written before goes where it was meant to
    std::fflush(stderr);
    if (saved_ < 0 || dup2(replacement, target) < 0) std::abort();
  }
  ~ScopedFd() {
    std::fflush(stdout);
    std::fflush(stderr);
    dup2(saved_, target_);
    close(saved_);
  }
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;

 private:
  const int target_;
  const int saved_;
};

// A pseudo-terminal in raw mode (no echo, no line editing, no output
// translation), so that what is typed reaches the reader as is and what is
// shown arrives byte for byte. `fds` are pointed at it until destruction.
class Terminal {
 public:
  explicit Terminal(std::initializer_list<int> fds) {
    master_ = posix_openpt(O_RDWR | O_NOCTTY);
    if (master_ < 0 || grantpt(master_) != 0 || unlockpt(master_) != 0) std::abort();
    const int slave = open(ptsname(master_), O_RDWR | O_NOCTTY);
    if (slave < 0) std::abort();
    termios mode;
    if (tcgetattr(slave, &mode) != 0) std::abort();
    cfmakeraw(&mode);
    if (tcsetattr(slave, TCSANOW, &mode) != 0) std::abort();
    for (int fd : fds) redirects_.push_back(new ScopedFd(fd, slave));
    close(slave);
    // std::cin may be at end of file or buffered from an earlier test.
    std::cin.clear();
    std::clearerr(stdin);
  }
  ~Terminal() {
    for (auto it = redirects_.rbegin(); it != redirects_.rend(); ++it) delete *it;
    close(master_);
    std::cin.clear();
    std::clearerr(stdin);
  }
  Terminal(const Terminal&) = delete;
  Terminal& operator=(const Terminal&) = delete;

  // Keys typed on the terminal (read by whoever reads stdin).
  void Type(const std::string& input) {
    if (write(master_, input.data(), input.size()) != static_cast<ssize_t>(input.size())) std::abort();
  }
  // Everything shown on the terminal since the last call: read until nothing
  // more arrives for 200 ms (the pty hands writes over asynchronously).
  std::string Shown() {
    std::fflush(stderr);
    std::string shown;
    char buf[4096];
    pollfd p{master_, POLLIN, 0};
    while (poll(&p, 1, 200) > 0 && (p.revents & POLLIN)) {
      const ssize_t n = read(master_, buf, sizeof(buf));
      if (n <= 0) break;
      shown.append(buf, static_cast<size_t>(n));
    }
    return shown;
  }

 private:
  int master_ = -1;
  std::vector<ScopedFd*> redirects_;
};

// A pipe whose write end replaces `fd` (not a terminal) until destruction.
class Pipe {
 public:
  explicit Pipe(int fd) {
    if (pipe(ends_) != 0) std::abort();
    redirect_ = new ScopedFd(fd, ends_[1]);
    close(ends_[1]);
  }
  ~Pipe() {
    delete redirect_;
    close(ends_[0]);
  }
  Pipe(const Pipe&) = delete;
  Pipe& operator=(const Pipe&) = delete;
  // What was written, once the redirect ends (call after the code ran).
  std::string Drain() {
    delete redirect_;
    redirect_ = nullptr;
    std::string out;
    char buf[4096];
    ssize_t n;
    while ((n = read(ends_[0], buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
    return out;
  }

 private:
  int ends_[2];
  ScopedFd* redirect_ = nullptr;
};

}  // namespace trainsnap::cli_test
