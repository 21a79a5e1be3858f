// Mapping a file, or reading it into huge pages with parallel preads: with direct I/O where the
// filesystem has it (io/file_read.h), which on a virtual disk loaded a 17 GB model in about 0.75x
// the time at a quarter of the system CPU, and leaves no second copy in the page cache.
#include "io/file_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <utility>

#include "base/check.h"
#include "base/memory.h"
#include "base/parallel.h"
#include "io/file_read.h"

namespace glm4 {

namespace {
// Each parallel task reads this much: large enough for long sequential reads, small enough to
// spread a shard over every thread.
constexpr size_t kReadChunk = size_t(32) << 20;
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
  const OwnedFd f(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
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
    // -1 where the filesystem has no direct I/O
    const OwnedFd direct(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT));
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
