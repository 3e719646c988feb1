// Redirects file descriptor 2 into a pipe for the lifetime of the object.
#pragma once
#include <fcntl.h>
#include <unistd.h>

#include <string>

class StderrCapture {
 public:
  StderrCapture() {
    if (pipe(fds_) != 0) return;
    fcntl(fds_[0], F_SETFL, O_NONBLOCK);
    saved_ = dup(2);
    dup2(fds_[1], 2);
  }
  ~StderrCapture() { restore(); }
  std::string text() {
    restore();
    std::string out;
    char buf[4096];
    ssize_t n;
    while ((n = read(fds_[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
    return out;
  }

 private:
  void restore() {
    if (saved_ >= 0) {
      dup2(saved_, 2);
      close(saved_);
      close(fds_[1]);
      saved_ = -1;
    }
  }
  int fds_[2] = {-1, -1};
  int saved_ = -1;
};
