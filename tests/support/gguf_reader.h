// Reads GGUF v2/v3 files over a read-only memory map. Every count, length, type, dimension,
// offset and the file size is checked before use; errors name the file and the field
// ("kv[3] 'tokenizer.ggml.tokens' item 17: string length ...", "tensor 'blk.0.attn_q.weight'
// offset"). Only the tests and the fuzz target read GGUF (what export/ wrote); the library never
// does.
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "export/gguf_format.h"

namespace glm4 {

// What a GGUF file may declare, checked before anything is allocated for it. Far above any real
// model (GLM-4-9B: ~40 keys, ~400 tensors, a 151,552-token vocabulary, a chat template of a few
// KB); counts must also fit in the bytes that are left. Errors name the file, field and limit.
constexpr uint64_t kMaxGgufKeyValues = uint64_t(1) << 16;
constexpr uint64_t kMaxGgufTensors = uint64_t(1) << 20;
constexpr uint64_t kMaxGgufArrayLength = uint64_t(1) << 24;  // items of one metadata array
constexpr uint64_t kMaxGgufStringBytes = uint64_t(1) << 26;  // one string: 64 MiB

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> ne;  // ggml dims, innermost first
  GgmlType type = GgmlType::F32;
  uint64_t offset = 0;  // from the start of the data section, as stored
  const uint8_t* data = nullptr;
  uint64_t nbytes = 0;

  int64_t numel() const;
  std::vector<float> to_f32() const;  // every value decoded (see ggml_decode)
};

class GgufFile {
 public:
  static std::shared_ptr<GgufFile> open(const std::filesystem::path& path);
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // where the data section starts

  const std::vector<std::pair<std::string, GgufValue>>& kvs() const { return kvs_; }
  const GgufValue* find(std::string_view key) const;  // nullptr if absent
  // The value of `key`; throws naming the file and key when it is absent or of another type.
  const GgufValue& at(std::string_view key, GgufType type) const;
  std::string get_string(std::string_view key) const { return at(key, GgufType::String).s; }
  uint32_t get_u32(std::string_view key) const { return uint32_t(at(key, GgufType::U32).u); }
  float get_f32(std::string_view key) const { return float(at(key, GgufType::F32).f); }

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(std::string_view name) const;
  const GgufTensorInfo& tensor(std::string_view name) const;  // throws naming file and tensor
  const std::filesystem::path& path() const { return path_; }

 private:
  GgufFile() = default;
  std::filesystem::path path_;
  void* map_ = nullptr;
  size_t size_ = 0;
  uint32_t version_ = 0;
  uint32_t alignment_ = kGgufDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> kvs_;
  std::unordered_map<std::string, size_t> kv_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::unordered_map<std::string, size_t> tensor_index_;
  friend class GgufParser;
};

}  // namespace glm4
