// Reading a byte range of a file into memory: through the page cache, or with direct I/O from the
// disk where the filesystem has it (FileBytes's reads into huge pages); and the descriptors.
#pragma once
#include <cstddef>
#include <string>

namespace glm4 {

// An open file descriptor (-1: none), closed when it goes out of scope.
struct OwnedFd {
  int fd = -1;
  explicit OwnedFd(int f = -1) : fd(f) {}
  OwnedFd(const OwnedFd&) = delete;
  OwnedFd& operator=(const OwnedFd&) = delete;
  ~OwnedFd();
};

// O_DIRECT's alignment of offsets, lengths and addresses: the largest logical block in use.
constexpr size_t kDirectAlign = 4096;

// Reads [offset, offset + n) of the file open as `fd` into dst; throws naming `where` and the
// byte on a failed read or a file that ends early.
void read_range(int fd, unsigned char* dst, size_t offset, size_t n, const std::string& where);

// The same through `direct` (the file opened with O_DIRECT, or -1) as far as it goes, returning
// the bytes read that way; the rest through `fd`, which names any error. Direct reads ask for
// whole kDirectAlign blocks, so at the file's end dst needs room up to the next block boundary
// (FileBytes's mappings are whole pages). A refusal (EINVAL: no direct I/O on this filesystem, or
// dst, offset or n not aligned) or a short read leaves the rest to `fd`.
size_t read_range_direct(int direct, int fd, unsigned char* dst, size_t offset, size_t n,
                         const std::string& where);

}  // namespace glm4
