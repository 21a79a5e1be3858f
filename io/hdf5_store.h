// HDF5 files for training checkpoints: named f32 / i64 / u8 datasets ("a/b/c" makes groups)
// and string / int64 attributes on the root. Writes are atomic (path.tmp, renamed on commit)
// and sealed with a checksum (hdf5_seal.h) that the reader verifies before libhdf5 sees the file.
// Debian's HDF5 is not thread-safe: use these objects from one thread at a time.
#pragma once
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

namespace glm4 {

// String attributes are fixed-length and at most this long (an object header holds 64 KiB).
constexpr size_t kMaxHdf5StringAttrBytes = 60'000;

class Hdf5Writer {
 public:
  explicit Hdf5Writer(std::filesystem::path path);  // creates path.tmp
  ~Hdf5Writer();                                    // without commit(): removes path.tmp
  Hdf5Writer(const Hdf5Writer&) = delete;
  Hdf5Writer& operator=(const Hdf5Writer&) = delete;

  // Datasets; `shape` empty = scalar. Writing a name twice is an error.
  void write_f32(const std::string& name, const std::vector<int64_t>& shape, const float* data);
  void write_i64(const std::string& name, const std::vector<int64_t>& shape, const int64_t* data);
  void write_u8(const std::string& name, std::span<const uint8_t> bytes);  // 1-d
  // Attributes on the root group (overwritten if set again).
  void set_attr(const std::string& name, const std::string& value);
  void set_attr_i64(const std::string& name, int64_t value);
  void commit();  // closes the file, flushes it to disk and renames it to the final path

 private:
  void write(const std::string& name, const std::vector<int64_t>& shape, int64_t file_type,
             int64_t mem_type, const void* data);
  void set_attr_raw(const std::string& name, int64_t type, const void* value);
  std::filesystem::path path_, tmp_;
  int64_t file_ = -1;  // hid_t
};

// The reader's limit on what a file can make it allocate: a dataset (or fixed-length string
// attribute) may not hold more bytes than the whole file, since glm4 writes datasets
// uncompressed. A corrupt header can declare terabytes without storing them; this refuses it,
// naming the file, the dataset and its size.
class Hdf5Reader {
 public:
  explicit Hdf5Reader(std::filesystem::path path);  // throws if missing or not HDF5
  ~Hdf5Reader();
  Hdf5Reader(const Hdf5Reader&) = delete;
  Hdf5Reader& operator=(const Hdf5Reader&) = delete;

  bool has(const std::string& name) const;  // a dataset of that name exists
  std::vector<int64_t> shape(const std::string& name) const;
  // Values; each throws naming the file and dataset if absent or stored with another type.
  std::vector<float> read_f32(const std::string& name) const;
  std::vector<int64_t> read_i64(const std::string& name) const;
  std::vector<uint8_t> read_u8(const std::string& name) const;
  std::string attr(const std::string& name) const;  // string attribute on the root
  int64_t attr_i64(const std::string& name) const;
  bool has_attr(const std::string& name) const;
  std::vector<std::string> names() const;  // every dataset, recursively, sorted ("a/b/c")
  const std::filesystem::path& path() const { return path_; }

 private:
  template <typename T>
  std::vector<T> read(const std::string& name, int cls, size_t size, bool is_signed,
                      int64_t mem_type, const char* what) const;
  std::filesystem::path path_;
  int64_t file_ = -1;  // hid_t
  uint64_t file_bytes_ = 0;
};

}  // namespace glm4
