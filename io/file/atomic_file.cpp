// Atomic file output over POSIX calls (open/write/fsync/rename).
#include "io/file/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>

#include "base/check.h"

namespace glm4 {

std::filesystem::path tmp_path_for(const std::filesystem::path& path) {
  std::filesystem::path tmp = path;
  tmp += ".tmp";
  return tmp;
}

void sync_and_rename(const std::filesystem::path& tmp, const std::filesystem::path& path) {
  int fd = ::open(tmp.c_str(), O_RDONLY | O_CLOEXEC);
  GLM4_CHECK(fd >= 0, "cannot reopen ", tmp, " to flush it: ", std::strerror(errno));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  GLM4_CHECK(rc == 0, "cannot flush ", tmp, " to disk: ", std::strerror(err));
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  GLM4_CHECK(!ec, "cannot rename ", tmp, " to ", path, ": ", ec.message());
}

AtomicFileWriter::AtomicFileWriter(std::filesystem::path path)
    : path_(std::move(path)), tmp_(tmp_path_for(path_)) {
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  GLM4_CHECK(fd_ >= 0, "cannot create ", tmp_, ": ", std::strerror(errno));
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) {
    std::error_code ec;
    std::filesystem::remove(tmp_, ec);  // best effort: a destructor must not throw
  }
}

void AtomicFileWriter::write(const void* data, size_t n) {
  GLM4_CHECK(fd_ >= 0, "write to ", path_, " after commit");
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd_, p, n);
    if (w < 0 && errno == EINTR) continue;
    GLM4_CHECK(w > 0, "cannot write ", tmp_, ": ", w < 0 ? std::strerror(errno) : "short write");
    p += w;
    n -= size_t(w);
  }
}

void AtomicFileWriter::commit() {
  GLM4_CHECK(fd_ >= 0, "commit of ", path_, " twice");
  int rc = ::fsync(fd_);
  int err = errno;
  int crc = ::close(fd_);
  fd_ = -1;
  GLM4_CHECK(rc == 0 && crc == 0, "cannot flush ", tmp_, " to disk: ", std::strerror(err));
  std::error_code ec;
  std::filesystem::rename(tmp_, path_, ec);
  GLM4_CHECK(!ec, "cannot rename ", tmp_, " to ", path_, ": ", ec.message());
  committed_ = true;
}

void write_file_atomic(const std::filesystem::path& path, std::string_view contents) {
  AtomicFileWriter out(path);
  out.write(contents);
  out.commit();
}

}  // namespace glm4
