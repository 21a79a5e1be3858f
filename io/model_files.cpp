// Model directory weights: single-file or index + shards, read and written as transformers does.
#include "io/model_files.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>

#include "base/check.h"
#include "io/file/atomic_file.h"
#include "io/file/json_file.h"

namespace glm4 {
namespace {

constexpr const char* kSingle = "model.safetensors";
constexpr const char* kIndex = "model.safetensors.index.json";

// A shard name must be a plain file in the directory: no separators, no "..".
bool plain_file_name(const std::string& s) {
  return !s.empty() && s != "." && s != ".." && s.find('/') == std::string::npos &&
         s.find('\0') == std::string::npos;
}

}  // namespace

std::string shard_file_name(size_t index, size_t count) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", index + 1, count);
  return buf;
}

ModelFiles ModelFiles::open(const std::filesystem::path& dir, FileResidency residency) {
  ModelFiles c;
  c.dir_ = dir;
  std::error_code ec;
  GLM4_CHECK(std::filesystem::is_directory(dir, ec), "model directory ", dir,
             " does not exist or is not a directory");
  if (std::filesystem::exists(dir / kSingle, ec)) {
    c.residency_ = resolve_residency(residency, std::filesystem::file_size(dir / kSingle, ec));
    auto f = SafetensorsFile::open(dir / kSingle, c.residency_);
    c.files_.push_back(f);
    for (const auto& t : f->tensors()) c.entries_.emplace(t.name, Entry{&t, f});
    return c;
  }
  const auto index_path = dir / kIndex;
  GLM4_CHECK(std::filesystem::exists(index_path, ec), "no model weights in ", dir, ": looked for ",
             kSingle, " and ", kIndex);
  nlohmann::json index = read_json_file(index_path);
  GLM4_CHECK(index.is_object(), index_path, ": expected a JSON object");
  auto wm = index.find("weight_map");
  GLM4_CHECK(wm != index.end() && wm->is_object(), index_path,
             ": missing or ill-typed 'weight_map' (expected an object of key -> shard file)");
  // The shards, checked and sized first: kAuto is decided over all of them.
  std::vector<std::string> shard_names;
  size_t total_bytes = 0;
  for (auto& [key, file] : wm->items()) {
    GLM4_CHECK(file.is_string(), index_path, ": weight_map['", key, "'] is a JSON ",
               file.type_name(), ", expected a file name");
    const std::string name = file.get<std::string>();
    GLM4_CHECK(plain_file_name(name), index_path, ": weight_map['", key, "'] = '", name,
               "' is not a file name in the directory");
    if (std::find(shard_names.begin(), shard_names.end(), name) != shard_names.end()) continue;
    GLM4_CHECK(std::filesystem::is_regular_file(dir / name, ec), index_path, ": weight_map['", key,
               "'] names shard '", name, "', which does not exist");
    shard_names.push_back(name);
    total_bytes += std::filesystem::file_size(dir / name, ec);
  }
  c.residency_ = resolve_residency(residency, total_bytes);
  std::map<std::string, std::shared_ptr<SafetensorsFile>> shards;
  for (const std::string& name : shard_names) {
    auto f = SafetensorsFile::open(dir / name, c.residency_);
    shards.emplace(name, f);
    c.files_.push_back(f);
  }
  for (auto& [key, file] : wm->items()) {
    const std::string name = file.get<std::string>();
    const TensorInfo* t = shards.at(name)->find(key);
    GLM4_CHECK(t != nullptr, index_path, ": weight_map['", key, "'] names shard '", name,
               "', which has no such tensor");
    c.entries_.emplace(key, Entry{t, shards.at(name)});
  }
  return c;
}

size_t ModelFiles::file_bytes() const {
  size_t total = 0;
  for (const auto& f : files_) total += f->file_bytes();
  return total;
}

size_t ModelFiles::direct_bytes() const {
  size_t total = 0;
  for (const auto& f : files_) total += f->direct_bytes();
  return total;
}

const TensorInfo* ModelFiles::find(const std::string& key) const {
  auto it = entries_.find(key);
  return it == entries_.end() ? nullptr : it->second.info;
}

const TensorInfo& ModelFiles::at(const std::string& key) const {
  const TensorInfo* t = find(key);
  GLM4_CHECK(t != nullptr, "model directory ", dir_, ": no tensor '", key, "'");
  return *t;
}

std::vector<std::string> ModelFiles::keys() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const auto& [k, e] : entries_) out.push_back(k);
  return out;
}

std::shared_ptr<const void> ModelFiles::owner(const std::string& key) const {
  auto it = entries_.find(key);
  GLM4_CHECK(it != entries_.end(), "model directory ", dir_, ": no tensor '", key, "'");
  return it->second.file;
}

size_t ModelFiles::discard(const std::string& key) {
  auto it = entries_.find(key);
  GLM4_CHECK(it != entries_.end(), "model directory ", dir_, ": no tensor '", key, "'");
  return it->second.file->discard(*it->second.info);
}

namespace {

// Greedy in order, as transformers' shard_checkpoint: close a shard when the next tensor would
// overflow it (so an oversized tensor ends up alone). Indexes into `tensors`.
std::vector<std::vector<size_t>> plan_shards(const std::filesystem::path& dir,
                                             const std::vector<TensorToWrite>& tensors,
                                             size_t max_shard_bytes) {
  std::set<std::string> seen;
  for (const auto& t : tensors)
    GLM4_CHECK(seen.insert(t.name).second, "write_model_files ", dir, ": tensor '", t.name,
               "' given twice");
  std::vector<std::vector<size_t>> shards(1);
  size_t shard_bytes = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const size_t n = tensors[i].nbytes;
    if (max_shard_bytes > 0 && !shards.back().empty() && shard_bytes + n > max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(i);
    shard_bytes += n;
  }
  return shards;
}

// Writes each shard with write_shard(path, indexes), then the index when there are several,
// and removes weight files of an earlier save (a stale model.safetensors would shadow the index).
template <typename WriteShard>
void write_shards(const std::filesystem::path& dir, const std::vector<TensorToWrite>& tensors,
                  size_t max_shard_bytes, WriteShard&& write_shard) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  GLM4_CHECK(!ec, "cannot create model directory ", dir, ": ", ec.message());
  const std::vector<std::vector<size_t>> shards = plan_shards(dir, tensors, max_shard_bytes);
  std::set<std::string> written;
  if (shards.size() == 1) {
    write_shard(dir / kSingle, shards[0]);
    written.insert(kSingle);
  } else {
    nlohmann::json weight_map = nlohmann::json::object();
    size_t total = 0;
    for (size_t i = 0; i < shards.size(); ++i) {
      const std::string name = shard_file_name(i, shards.size());
      write_shard(dir / name, shards[i]);
      written.insert(name);
      for (size_t t : shards[i]) {
        weight_map[tensors[t].name] = name;
        total += tensors[t].nbytes;
      }
    }
    nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    write_file_atomic(dir / kIndex, index.dump(2) + "\n");
    written.insert(kIndex);
  }
  static const std::regex stale(R"(model(-[0-9]+-of-[0-9]+)?\.safetensors(\.index\.json)?)");
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (!written.count(name) && std::regex_match(name, stale)) {
      std::filesystem::remove(e.path(), ec);
      GLM4_CHECK(!ec, "write_model_files: cannot remove stale ", e.path(), ": ", ec.message());
    }
  }
}

std::vector<TensorToWrite> pick(const std::vector<TensorToWrite>& all,
                                const std::vector<size_t>& idx) {
  std::vector<TensorToWrite> out;
  for (size_t i : idx) out.push_back(all[i]);
  return out;
}

}  // namespace

void write_model_files(const std::filesystem::path& dir, const std::vector<TensorToWrite>& tensors,
                       size_t max_shard_bytes, const std::map<std::string, std::string>& metadata) {
  write_shards(dir, tensors, max_shard_bytes,
               [&](const std::filesystem::path& path, const std::vector<size_t>& idx) {
                 write_safetensors(path, pick(tensors, idx), metadata);
               });
}

void write_model_files_streamed(const std::filesystem::path& dir,
                                const std::vector<TensorToWrite>& specs,
                                const TensorProducer& produce, size_t max_shard_bytes,
                                const std::map<std::string, std::string>& metadata) {
  write_shards(dir, specs, max_shard_bytes,
               [&](const std::filesystem::path& path, const std::vector<size_t>& idx) {
                 write_safetensors_streamed(
                     path, pick(specs, idx),
                     [&](size_t i, TensorSink& sink) { produce(idx[i], sink); }, metadata);
               });
}

}  // namespace glm4
