// Mapping a file, or reading it into huge pages with parallel preads (past the page cache where
// the filesystem allows).
#include "io/file_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <utility>

#include "base/check.h"
#include "base/memory.h"
#include "base/parallel.h"

namespace glm4 {

namespace {
// Each parallel task reads this much: large enough for long sequential reads, small enough to
// spread a shard over every thread.
constexpr size_t kReadChunk = size_t(32) << 20;

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

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

// O_DIRECT's alignment of offsets, lengths and addresses: the largest logical block in use.
constexpr size_t kDirectAlign = 4096;

// Reads [offset, offset + n) of the file into dst as read_range does, through `direct` (the file
// opened with O_DIRECT, or -1) as far as it goes, and returns the bytes read that way. A read from
// the disk straight into dst is 1.2-2.4x faster than through the page cache on a virtual disk, at
// a tenth of the CPU time, and leaves no second copy in the cache. At the file's end the direct
// read asks for whole blocks (dst has room: the mapping is whole pages). A refusal (EINVAL: the
// filesystem has no direct I/O) or a short read leaves the rest to `fd`, which names any error.
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
}  // namespace

const char* residency_name(FileResidency r) {
  switch (r) {
    case FileResidency::kAuto:
      return "auto";
    case FileResidency::kHugePages:
      return "huge_pages";
    case FileResidency::kMapped:
      break;
  }
  return "mmap";
}

FileResidency resolve_residency(FileResidency r, size_t total_bytes) {
  if (r != FileResidency::kAuto) return r;
  const int64_t available = available_memory_bytes();
  const bool fits = available < 0 || total_bytes + kMemoryHeadroom <= size_t(available);
  return fits ? FileResidency::kHugePages : FileResidency::kMapped;
}

FileBytes FileBytes::open(const std::filesystem::path& path, FileResidency residency,
                          const char* what) {
  const std::string where = str_cat(what, " ", path);
  Fd f;
  f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  GLM4_CHECK(f.fd >= 0, where, ": cannot open: ", std::strerror(errno));
  struct stat st;
  GLM4_CHECK(::fstat(f.fd, &st) == 0 && S_ISREG(st.st_mode), where, ": not a regular file");
  FileBytes out;
  out.size_ = size_t(st.st_size);
  if (out.size_ == 0) return out;
  residency = resolve_residency(residency, out.size_);
  if (residency == FileResidency::kHugePages && out.size_ >= kHugePageBytes) {
    out.base_ = map_anonymous(out.size_, where.c_str());
    out.residency_ = FileResidency::kHugePages;
    auto* dst = static_cast<unsigned char*>(out.base_);
    Fd direct;  // -1 where the filesystem has no direct I/O
    direct.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
    std::atomic<size_t> direct_bytes{0};
    const int64_t chunks = int64_t((out.size_ + kReadChunk - 1) / kReadChunk);
    parallel_for(chunks, 1, [&](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c) {
        const size_t offset = size_t(c) * kReadChunk;
        direct_bytes += read_range_direct(direct.fd, f.fd, dst + offset, offset,
                                          std::min(kReadChunk, out.size_ - offset), where);
      }
    });
    out.direct_bytes_ = direct_bytes;
    ::posix_fadvise(f.fd, 0, 0, POSIX_FADV_DONTNEED);  // one copy: ours
    return out;
  }
  void* base = ::mmap(nullptr, out.size_, PROT_READ, MAP_PRIVATE, f.fd, 0);
  GLM4_CHECK(base != MAP_FAILED, where, ": cannot mmap: ", std::strerror(errno));
  out.base_ = base;
  return out;
}

FileBytes& FileBytes::operator=(FileBytes&& o) noexcept {
  if (this != &o) {
    release();
    base_ = std::exchange(o.base_, nullptr);
    size_ = std::exchange(o.size_, 0);
    direct_bytes_ = std::exchange(o.direct_bytes_, 0);
    residency_ = o.residency_;
  }
  return *this;
}

FileBytes::~FileBytes() { release(); }

size_t FileBytes::discard(const void* p, size_t n) {
  constexpr uintptr_t kPage = 4096;
  const auto begin = reinterpret_cast<uintptr_t>(p), end = begin + n;
  const auto base = reinterpret_cast<uintptr_t>(base_);
  GLM4_CHECK(n == 0 || (begin >= base && end <= base + size_), "[file bytes] discard of ", n,
             " bytes outside the file's ", size_, " bytes");
  const uintptr_t first = (begin + kPage - 1) / kPage * kPage, last = end / kPage * kPage;
  if (last <= first) return 0;
  GLM4_CHECK(::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED) == 0,
             "[file bytes] madvise(MADV_DONTNEED) failed: ", std::strerror(errno));
  return last - first;
}

void FileBytes::release() {
  if (base_ == nullptr) return;
  if (residency_ == FileResidency::kHugePages)
    unmap_anonymous(base_, size_);
  else
    ::munmap(base_, size_);
  base_ = nullptr;
}

}  // namespace glm4
