// Safetensors files: a strict, bounds-checked reader over the file's bytes in memory (tensors
// point straight into them, zero copy) and an atomic writer of the standard format.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/dtype.h"
#include "io/file_memory.h"

namespace glm4 {

// What a safetensors header may declare before glm4 refuses the file (errors name the file and
// the limit). The header's JSON is parsed whole, so its size bounds the memory spent on it; a
// tensor's bytes must lie inside the file (checked per tensor, so no limit is needed there).
constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;  // the reference implementation's
constexpr size_t kMaxSafetensorsTensors = size_t(1) << 18;    // per file; real shards hold < 10,000
constexpr size_t kMaxSafetensorsDims = 8;                     // real tensors have at most 5

// Bytes per element of a safetensors dtype ("F32", "BF16", "I64", "BOOL", ...); 0 if unknown.
size_t safetensors_dtype_size(std::string_view dtype);

// One tensor of a file. `data` points into the owner's mapping (valid while the owner lives)
// and need not be aligned when the writer did not pad its header; copy with memcpy.
struct TensorInfo {
  std::string name;
  std::string dtype;           // as in the file: "F32", "BF16", "F16", "I32", "I64", "U8", ...
  std::vector<int64_t> shape;  // empty for a 0-d tensor
  const std::byte* data = nullptr;
  size_t nbytes = 0;

  int64_t numel() const;      // product of shape (1 for 0-d)
  DType float_dtype() const;  // F32/BF16/F16, else throws naming the tensor and its dtype
};

class SafetensorsFile {
 public:
  // Brings the file into memory (mapped, or read into huge pages: see FileResidency) and
  // validates it; throws glm4::Error naming the file (and tensor) at fault.
  static std::shared_ptr<SafetensorsFile> open(const std::filesystem::path& path,
                                               FileResidency residency = FileResidency::kMapped);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::vector<TensorInfo>& tensors() const { return tensors_; }  // by data offset
  const TensorInfo* find(std::string_view name) const;                 // nullptr if absent
  const TensorInfo& at(std::string_view name) const;  // throws naming the file and key
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::filesystem::path& path() const { return path_; }
  FileResidency residency() const { return bytes_.residency(); }
  size_t file_bytes() const { return bytes_.size(); }
  size_t direct_bytes() const { return bytes_.direct_bytes(); }  // FileBytes::direct_bytes
  // FileBytes::discard of `t`'s bytes (a tensor of this file), never to be read again.
  size_t discard(const TensorInfo& t) { return bytes_.discard(t.data, t.nbytes); }

 private:
  SafetensorsFile() = default;
  std::filesystem::path path_;
  FileBytes bytes_;
  std::vector<TensorInfo> tensors_;
  std::unordered_map<std::string_view, size_t> index_;  // name -> position in tensors_
  std::map<std::string, std::string> metadata_;
};

// A tensor to write; `data` holds `nbytes` bytes in the file's little-endian layout.
struct TensorToWrite {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  size_t nbytes = 0;
};

// Writes the standard format atomically (path.tmp, then rename): 8-byte little-endian header
// length, JSON header padded with spaces to a multiple of 8, then the data, contiguous. Data is
// laid out by element size, largest first, otherwise in the given order, so every tensor is
// naturally aligned. Throws on duplicate names, unknown dtypes or nbytes != numel * size.
void write_safetensors(const std::filesystem::path& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// Where a streamed tensor's bytes go, in order.
class TensorSink {
 public:
  virtual ~TensorSink() = default;
  virtual void write(const void* data, size_t n) = 0;
};
// Writes tensor `index`'s bytes (exactly its nbytes) into `sink` when the writer reaches it.
using TensorProducer = std::function<void(size_t index, TensorSink& sink)>;

// The same format with the bytes produced on the fly, tensor by tensor in the given order (not
// reordered: the caller keeps tensors aligned, e.g. a module's U32 codes before its 16-bit
// scales), so no tensor needs to exist in memory before its turn; `data` of the specs is
// ignored. Throws naming the tensor when a producer writes more or fewer bytes than nbytes.
void write_safetensors_streamed(const std::filesystem::path& path,
                                const std::vector<TensorToWrite>& specs,
                                const TensorProducer& produce,
                                const std::map<std::string, std::string>& metadata = {});

// An F32 tensor to write from a float buffer.
TensorToWrite f32_tensor(std::string name, std::vector<int64_t> shape, const float* data);

// Test helpers: copies of the values, widened to float (F32/BF16/F16) or int64 (I32/I64).
std::vector<float> read_f32(const TensorInfo& t);
std::vector<int64_t> read_int(const TensorInfo& t);

}  // namespace glm4
