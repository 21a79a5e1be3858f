#include "io/file_read.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/check.h"

namespace glm4 {

OwnedFd::~OwnedFd() {
  if (fd >= 0) ::close(fd);
}

void read_range(int fd, unsigned char* dst, size_t offset, size_t n, const std::string& where) {
  while (n > 0) {
    const ssize_t got = ::pread(fd, dst, n, off_t(offset));
    if (got < 0 && errno == EINTR) continue;
    GLM4_CHECK(got > 0, where, ": read failed at byte ", offset, ": ",
               got == 0 ? "the file shrank while being read" : std::strerror(errno));
    dst += got;
    offset += size_t(got);
    n -= size_t(got);
  }
}

size_t read_range_direct(int direct, int fd, unsigned char* dst, size_t offset, size_t n,
                         const std::string& where) {
  size_t done = 0;
  while (direct >= 0 && done < n) {
    const size_t want = (n - done + kDirectAlign - 1) / kDirectAlign * kDirectAlign;
    const ssize_t got = ::pread(direct, dst + done, want, off_t(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    done += size_t(got);
    if (size_t(got) % kDirectAlign != 0) break;  // only the file's end reads a partial block
  }
  done = std::min(done, n);
  if (done < n) read_range(fd, dst + done, offset + done, n - done, where);
  return done;
}

}  // namespace glm4
