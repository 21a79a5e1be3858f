// Huge-page anonymous mappings (over-map by one huge page, trim to a 2 MB boundary, advise) and
// the kernel's memory figures.
#include "base/memory.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>

#include "base/check.h"

namespace glm4 {

namespace {
constexpr size_t kSmallPage = 4096;
size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }
}  // namespace

size_t anonymous_mapping_bytes(size_t bytes) {
  bytes = bytes == 0 ? 1 : bytes;
  return bytes >= kHugePageBytes ? round_up(bytes, kHugePageBytes) : round_up(bytes, kSmallPage);
}

void* map_anonymous(size_t bytes, const char* what) {
  const size_t length = anonymous_mapping_bytes(bytes);
  const bool huge = length >= kHugePageBytes;
  const size_t slack = huge ? kHugePageBytes : 0;
  void* raw =
      ::mmap(nullptr, length + slack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  GLM4_CHECK(raw != MAP_FAILED, what, ": cannot map ", bytes,
             " bytes of memory: ", std::strerror(errno));
  if (!huge) return raw;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = round_up(begin, kHugePageBytes);
  if (aligned > begin) ::munmap(raw, aligned - begin);
  const size_t tail = begin + length + slack - (aligned + length);
  if (tail > 0) ::munmap(reinterpret_cast<void*>(aligned + length), tail);
  void* p = reinterpret_cast<void*>(aligned);
  ::madvise(p, length, MADV_HUGEPAGE);  // advice: where THP is off the pages stay 4 KB
  return p;
}

void unmap_anonymous(void* p, size_t bytes) {
  if (p != nullptr) ::munmap(p, anonymous_mapping_bytes(bytes));
}

namespace {
// The value of "KEY: N kB" in a /proc file, in bytes; -1 if absent.
int64_t proc_kib_field(const char* file, const std::string& key) {
  std::ifstream in(file);
  std::string name;
  int64_t kib;
  while (in >> name) {
    if (name == key && in >> kib) return kib * 1024;
    in.ignore(1 << 20, '\n');
  }
  return -1;
}
}  // namespace

int64_t anon_huge_page_bytes() {
  return proc_kib_field("/proc/self/smaps_rollup", "AnonHugePages:");
}
int64_t available_memory_bytes() { return proc_kib_field("/proc/meminfo", "MemAvailable:"); }

const char* transparent_huge_page_mode() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string word;
  while (in >> word)
    if (word.size() > 2 && word.front() == '[' && word.back() == ']') {
      word = word.substr(1, word.size() - 2);
      if (word == "always") return "always";
      if (word == "madvise") return "madvise";
      if (word == "never") return "never";
    }
  return "";
}

}  // namespace glm4
