// The weights of a Hugging Face model directory: one `model.safetensors`, or shards listed by
// `model.safetensors.index.json`; and the matching writer (sharded the way transformers does).
#pragma once
#include <cstddef>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "io/safetensors.h"

namespace glm4 {

class ModelFiles {
 public:
  // Opens `dir`: model.safetensors if present, else the index and every shard it names (each
  // shard must exist and hold the keys the index gives it). Throws naming the file and key.
  // kAuto is decided once for all the files together (resolve_residency).
  static ModelFiles open(const std::filesystem::path& dir,
                         FileResidency residency = FileResidency::kMapped);

  const TensorInfo* find(const std::string& key) const;  // nullptr if absent
  const TensorInfo& at(const std::string& key) const;    // throws naming the directory and key
  std::vector<std::string> keys() const;                 // sorted
  // The mapping that holds `key`'s bytes (its SafetensorsFile); keep it to keep `data` valid.
  std::shared_ptr<const void> owner(const std::string& key) const;
  // Frees the memory of `key`'s bytes, which must never be read again (SafetensorsFile::discard):
  // for tensors whose values were copied into another form at load. Returns the bytes freed.
  size_t discard(const std::string& key);
  const std::vector<std::shared_ptr<SafetensorsFile>>& files() const { return files_; }
  const std::filesystem::path& dir() const { return dir_; }
  FileResidency residency() const { return residency_; }  // as resolved
  size_t file_bytes() const;                              // of all the files
  size_t direct_bytes() const;  // of those, read with direct I/O (FileBytes::direct_bytes)

 private:
  struct Entry {
    const TensorInfo* info;
    std::shared_ptr<SafetensorsFile> file;
  };
  std::filesystem::path dir_;
  FileResidency residency_ = FileResidency::kMapped;
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, Entry, std::less<>> entries_;
};

// HF shard file name: shard_file_name(0, 3) == "model-00001-of-00003.safetensors".
std::string shard_file_name(size_t index, size_t count);

// Writes `tensors` (in order) into `dir` (created if missing): one `model.safetensors` when
// max_shard_bytes is 0 or everything fits, else `model-0000N-of-0000M.safetensors` files plus
// `model.safetensors.index.json` ({"metadata": {"total_size": bytes}, "weight_map": {key:
// file}}). A shard closes when the next tensor would push it past max_shard_bytes; a tensor
// larger than that gets a shard of its own. `metadata` goes into every file's __metadata__.
// Each file is written atomically; weight files of an earlier save that are not part of this
// one are removed afterwards, so the directory never mixes two checkpoints.
void write_model_files(const std::filesystem::path& dir, const std::vector<TensorToWrite>& tensors,
                       size_t max_shard_bytes = 0,
                       const std::map<std::string, std::string>& metadata = {});

// The same with each tensor's bytes produced when the writer reaches it (write_safetensors_
// streamed): produce(i, sink) is called once per tensor, in the order given, across the shards.
// For models that must never sit whole in memory in their written form (quantize, init --bits).
void write_model_files_streamed(const std::filesystem::path& dir,
                                const std::vector<TensorToWrite>& specs,
                                const TensorProducer& produce, size_t max_shard_bytes = 0,
                                const std::map<std::string, std::string>& metadata = {});

}  // namespace glm4
