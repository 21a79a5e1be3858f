// A whole file's bytes in memory, held one of two ways: mapped (pages come from the page cache
// as they are touched, 4 KB each) or read once into anonymous memory in 2 MB pages.
#pragma once
#include <cstddef>
#include <filesystem>

namespace glm4 {

enum class FileResidency {
  kAuto,       // huge pages when the bytes fit the memory available, else mapped
  kMapped,     // mmap of the file, read-only
  kHugePages,  // read in parallel into huge pages, with direct I/O where the filesystem has it
               // (past the page cache), and the file's cached pages dropped afterwards: the
               // machine holds one copy. Files under one huge page are mapped instead.
};
const char* residency_name(FileResidency r);  // "auto", "mmap", "huge_pages"

// What kAuto means for `total_bytes` read together (a model's shards): kHugePages when they fit
// MemAvailable less kMemoryHeadroom (room for activations and the KV cache), else kMapped.
// Other values are returned as they are.
constexpr size_t kMemoryHeadroom = size_t(1) << 30;
FileResidency resolve_residency(FileResidency r, size_t total_bytes);

// Owns the bytes; moves only. `what` names the file in errors ("safetensors <path>").
class FileBytes {
 public:
  static FileBytes open(const std::filesystem::path& path, FileResidency residency,
                        const char* what);
  FileBytes() = default;
  FileBytes(FileBytes&& o) noexcept { *this = std::move(o); }
  FileBytes& operator=(FileBytes&& o) noexcept;
  ~FileBytes();

  const unsigned char* data() const { return static_cast<const unsigned char*>(base_); }
  size_t size() const { return size_; }
  FileResidency residency() const { return residency_; }  // what was used
  // Of the bytes read into huge pages, those read with direct I/O (from the disk, not through
  // the page cache); 0 when mapped.
  size_t direct_bytes() const { return direct_bytes_; }
  // Gives the whole 4 KB pages inside [p, p + n) back to the system (a huge page they share is
  // split) and returns their bytes. For bytes that were read once and are never read again: a
  // later read gives zeros (huge pages) or the file's bytes again (mapped).
  size_t discard(const void* p, size_t n);

 private:
  void release();
  void* base_ = nullptr;
  size_t size_ = 0;
  size_t direct_bytes_ = 0;
  FileResidency residency_ = FileResidency::kMapped;
};

}  // namespace glm4
