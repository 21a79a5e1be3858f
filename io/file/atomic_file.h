// Atomic file output: bytes go to `path.tmp` in the same directory, are flushed to disk and
// renamed over `path` on commit(), so readers never see a half-written file.
#pragma once
#include <cstddef>
#include <filesystem>
#include <string_view>

namespace glm4 {

// The temporary name used for `path` while it is being written: `path` + ".tmp".
std::filesystem::path tmp_path_for(const std::filesystem::path& path);

// Flushes `tmp` to disk and renames it to `path`; throws naming both on failure.
void sync_and_rename(const std::filesystem::path& tmp, const std::filesystem::path& path);

class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::filesystem::path path);  // creates (truncates) path.tmp
  ~AtomicFileWriter();                                    // removes path.tmp unless committed
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* data, size_t n);  // appends; throws naming the file on a short write
  void write(std::string_view s) { write(s.data(), s.size()); }
  void commit();  // fsync, close, rename to the final path
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_, tmp_;
  int fd_ = -1;
  bool committed_ = false;
};

// Writes a whole small file (JSON, text) atomically.
void write_file_atomic(const std::filesystem::path& path, std::string_view contents);

}  // namespace glm4
