// Memory from the kernel: anonymous mappings in 2 MB pages for what is large and read again and
// again (model weights, big activation blocks), and what the kernel says of memory. Gigabytes in 4
// KB pages cost a page walk every few kilobytes read (a nested one, in a virtual machine); in 2 MB
// pages the TLB covers them. The kernel grants huge pages to regions advised MADV_HUGEPAGE when its
// THP mode is `always` or `madvise`.
#pragma once
#include <cstddef>
#include <cstdint>

namespace glm4 {

constexpr size_t kHugePageBytes = size_t(2) << 20;

// A zero-filled read-write anonymous mapping of at least `bytes`. From one huge page up it is
// 2 MB aligned, a whole number of huge pages long and advised MADV_HUGEPAGE. Throws glm4::Error
// naming `what` when the kernel refuses. Release with unmap_anonymous(p, bytes).
void* map_anonymous(size_t bytes, const char* what);
void unmap_anonymous(void* p, size_t bytes);
// The length map_anonymous(bytes) maps.
size_t anonymous_mapping_bytes(size_t bytes);

// This process's anonymous memory held in huge pages (AnonHugePages of /proc/self/smaps_rollup),
// in bytes; -1 where the kernel does not say.
int64_t anon_huge_page_bytes();
// MemAvailable of /proc/meminfo in bytes (what can be had without swapping); -1 if unknown.
int64_t available_memory_bytes();
// The transparent huge page mode of this kernel: "always", "madvise", "never", or "" if unknown.
const char* transparent_huge_page_mode();

}  // namespace glm4
