// Writes GGUF v3 files: header, metadata key/values in the order given, tensor infos, then the
// tensor data, each tensor padded to the alignment. Tensor bytes are produced one tensor at a time
// while writing, so a model never has to be held in memory twice. Written to path.tmp, renamed.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "export/gguf_format.h"

namespace glm4 {

class GgufWriter {
 public:
  // Produces a tensor's bytes in ggml layout; called once, in tensor order, during write().
  using Producer = std::function<std::vector<uint8_t>()>;

  // alignment: power of two; general.alignment is written only when it is not 32 (as gguf-py).
  explicit GgufWriter(uint32_t alignment = kGgufDefaultAlignment);

  // Throws naming the key when it was set before.
  void set(const std::string& key, GgufValue value);
  bool has(const std::string& key) const;
  // ne: ggml dims, innermost first (a row-major [rows, cols] matrix is {cols, rows}). Throws on
  // a duplicate name, more than 4 dims, a negative dim, or ne[0] not a multiple of the block.
  void add_tensor(const std::string& name, std::vector<int64_t> ne, GgmlType type, Producer bytes);

  size_t tensor_count() const { return tensors_.size(); }
  // Writes the file; throws naming the file, and the tensor whose producer gave a wrong size.
  void write(const std::filesystem::path& path) const;

 private:
  struct Tensor {
    std::string name;
    std::vector<int64_t> ne;
    GgmlType type;
    uint64_t nbytes;
    Producer bytes;
  };
  uint32_t alignment_;
  std::vector<std::pair<std::string, GgufValue>> kvs_;
  std::vector<Tensor> tensors_;
};

// Bytes of a tensor with ggml dims ne and type t (ne[0] a multiple of the block size).
uint64_t ggml_nbytes(GgmlType t, const std::vector<int64_t>& ne);

}  // namespace glm4
