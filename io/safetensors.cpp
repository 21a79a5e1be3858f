// Safetensors reader (strict header validation over the file in memory) and atomic writer.
#include "io/safetensors.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>

#include "base/check.h"
#include "io/file/atomic_file.h"
#include "io/file/json_depth.h"

namespace glm4 {
namespace {

using ojson = nlohmann::ordered_json;  // the writer: keys in the order given
// The reader: plain nlohmann::json. Both ordered_json (a linear search per key) and a parser
// callback (after each object, a scan of its parent for discarded values) make a header of n
// tensors cost O(n^2): 262,144 empty tensors took 150 s. TopLevelKeys records file order and
// duplicates in linear time instead.
using rjson = nlohmann::json;

// numel of a shape, or -1 on overflow past int64.
int64_t checked_numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return -1;
  }
  return n;
}

// nbytes of `numel` elements of `elem` bytes, or false on overflow.
bool checked_nbytes(int64_t numel, size_t elem, uint64_t* out) {
  return numel >= 0 && !__builtin_mul_overflow(uint64_t(numel), uint64_t(elem), out);
}

uint64_t read_le64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// A non-negative JSON integer that fits int64 (data offsets, dims); false otherwise.
bool as_index(const rjson& v, int64_t* out) {
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    if (u > uint64_t(INT64_MAX)) return false;
    *out = int64_t(u);
    return true;
  }
  if (v.is_number_integer()) {
    *out = v.get<int64_t>();
    return *out >= 0;
  }
  return false;
}

// The DOM parser plus what the reader needs of the top level: keys in file order, the first one
// given twice, and a stop as soon as there are more than `max_keys`.
class TopLevelKeys : public nlohmann::detail::json_sax_dom_parser<rjson> {
 public:
  TopLevelKeys(rjson& root, size_t max_keys, std::string where)
      : json_sax_dom_parser(root, true), max_keys_(max_keys), where_(std::move(where)) {}
  bool start_object(std::size_t n) {
    ++depth_;
    return json_sax_dom_parser::start_object(n);
  }
  bool end_object() {
    --depth_;
    return json_sax_dom_parser::end_object();
  }
  bool start_array(std::size_t n) {
    ++depth_;
    return json_sax_dom_parser::start_array(n);
  }
  bool end_array() {
    --depth_;
    return json_sax_dom_parser::end_array();
  }
  bool key(std::string& k) {
    if (depth_ == 1) {
      if (!seen_.insert(k).second && duplicate.empty()) duplicate = k;
      GLM4_CHECK(seen_.size() <= max_keys_, where_, "header has more than ", max_keys_ - 1,
                 " tensors (limit kMaxSafetensorsTensors)");
      keys.push_back(k);
    }
    return json_sax_dom_parser::key(k);
  }
  std::vector<std::string> keys;
  std::string duplicate;

 private:
  size_t max_keys_;
  std::string where_;
  int depth_ = 0;
  std::set<std::string> seen_;
};

}  // namespace

size_t safetensors_dtype_size(std::string_view d) {
  if (d == "F32" || d == "I32" || d == "U32") return 4;
  if (d == "BF16" || d == "F16" || d == "I16" || d == "U16") return 2;
  if (d == "F64" || d == "I64" || d == "U64") return 8;
  if (d == "BOOL" || d == "U8" || d == "I8" || d == "F8_E4M3" || d == "F8_E5M2" || d == "F8_E8M0")
    return 1;
  return 0;
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

DType TensorInfo::float_dtype() const {
  DType t;
  GLM4_CHECK(parse_dtype(dtype, &t) && dtype == dtype_name(t), "tensor '", name, "' has dtype ",
             dtype, "; expected F32, BF16 or F16");
  return t;
}

std::shared_ptr<SafetensorsFile> SafetensorsFile::open(const std::filesystem::path& path,
                                                       FileResidency residency) {
  std::shared_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  f->bytes_ = FileBytes::open(path, residency, "safetensors");
  const size_t file_size = f->bytes_.size();
  GLM4_CHECK(file_size >= 8, "safetensors ", path, ": file is ", file_size,
             " bytes, shorter than the 8-byte header length");
  const unsigned char* bytes = f->bytes_.data();
  auto where = [&](const std::string& tensor) {
    return tensor.empty() ? str_cat("safetensors ", path, ": ")
                          : str_cat("safetensors ", path, ": tensor '", tensor, "': ");
  };

  uint64_t header_len = read_le64(bytes);
  GLM4_CHECK(header_len <= kMaxSafetensorsHeaderBytes, where(""), "header length ", header_len,
             " is absurd (limit kMaxSafetensorsHeaderBytes = ", kMaxSafetensorsHeaderBytes,
             " bytes)");
  GLM4_CHECK(header_len <= file_size - 8, where(""), "header length ", header_len,
             " runs past the end of the file (", file_size,
             " bytes): truncated or not safetensors");
  const char* header = reinterpret_cast<const char*>(bytes + 8);
  const std::byte* data = reinterpret_cast<const std::byte*>(bytes + 8 + header_len);
  const uint64_t data_size = file_size - 8 - header_len;

  // Parse, remembering top-level keys given twice (JSON allows it; we do not) and stopping as
  // soon as there are more than kMaxSafetensorsTensors of them.
  check_json_depth(std::string_view(header, header_len),
                   str_cat("safetensors ", path.string(), ": header"));
  rjson root;
  TopLevelKeys top(root, kMaxSafetensorsTensors + 1, where(""));  // + 1: __metadata__
  try {
    rjson::sax_parse(header, header + header_len, &top);
  } catch (const rjson::exception& e) {
    fail(where(""), "header is not valid JSON: ", e.what());
  }
  const std::vector<std::string>& keys = top.keys;
  const std::string& duplicate = top.duplicate;
  GLM4_CHECK(root.is_object(), where(""), "header is a JSON ", root.type_name(),
             ", expected an object");
  GLM4_CHECK(duplicate.empty(), where(""), "header names key '", duplicate, "' twice");

  std::vector<std::pair<int64_t, int64_t>> spans;  // [begin, end) per tensor
  for (const std::string& name : keys) {
    const rjson& entry = root.at(name);
    if (name == "__metadata__") {
      GLM4_CHECK(entry.is_object(), where(""), "__metadata__ is a JSON ", entry.type_name(),
                 ", expected an object of strings");
      for (auto& [k, v] : entry.items()) {
        GLM4_CHECK(v.is_string(), where(""), "__metadata__ value of '", k, "' is a JSON ",
                   v.type_name(), ", expected a string");
        f->metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    GLM4_CHECK(entry.is_object(), where(name), "entry is a JSON ", entry.type_name(),
               ", expected an object");
    TensorInfo t;
    t.name = name;

    auto dt = entry.find("dtype");
    GLM4_CHECK(dt != entry.end(), where(name), "missing 'dtype'");
    GLM4_CHECK(dt->is_string(), where(name), "'dtype' is a JSON ", dt->type_name(),
               ", expected a string");
    t.dtype = dt->get<std::string>();
    size_t elem = safetensors_dtype_size(t.dtype);
    GLM4_CHECK(elem > 0, where(name), "unknown dtype '", t.dtype, "'");

    auto sh = entry.find("shape");
    GLM4_CHECK(sh != entry.end(), where(name), "missing 'shape'");
    GLM4_CHECK(sh->is_array(), where(name), "'shape' is a JSON ", sh->type_name(),
               ", expected an array of integers");
    GLM4_CHECK(sh->size() <= kMaxSafetensorsDims, where(name), "'shape' has ", sh->size(),
               " dimensions (limit kMaxSafetensorsDims = ", kMaxSafetensorsDims, ")");
    for (const auto& d : *sh) {
      GLM4_CHECK(d.is_number_integer(), where(name), "'shape' holds ", d.dump(),
                 ", expected integers");
      int64_t v;
      GLM4_CHECK(as_index(d, &v), where(name), "'shape' has negative or huge dimension ", d.dump());
      t.shape.push_back(v);
    }

    auto off = entry.find("data_offsets");
    GLM4_CHECK(off != entry.end(), where(name), "missing 'data_offsets'");
    GLM4_CHECK(off->is_array() && off->size() == 2, where(name), "'data_offsets' is ", off->dump(),
               ", expected [begin, end]");
    int64_t begin, end;
    GLM4_CHECK(as_index((*off)[0], &begin) && as_index((*off)[1], &end), where(name),
               "'data_offsets' ", off->dump(), " are not two non-negative 64-bit integers");
    GLM4_CHECK(begin <= end, where(name), "'data_offsets' end ", end, " is before begin ", begin);
    GLM4_CHECK(uint64_t(end) <= data_size, where(name), "'data_offsets' [", begin, ", ", end,
               ") run past the data section (", data_size, " bytes): file truncated?");

    int64_t numel = checked_numel(t.shape);
    uint64_t want;
    GLM4_CHECK(numel >= 0 && checked_nbytes(numel, elem, &want), where(name), "shape ", sh->dump(),
               " is too large");
    GLM4_CHECK(want == uint64_t(end - begin), where(name), "holds ", end - begin,
               " bytes but shape ", sh->dump(), " of ", t.dtype, " needs ", want);
    t.data = data + begin;
    t.nbytes = size_t(end - begin);
    f->tensors_.push_back(std::move(t));
    spans.emplace_back(begin, end);
  }

  GLM4_CHECK(f->tensors_.size() <= kMaxSafetensorsTensors, where(""), "header has more than ",
             kMaxSafetensorsTensors, " tensors (limit kMaxSafetensorsTensors)");

  // File order: by data offset (header order breaks ties). Non-empty tensors may not overlap.
  std::vector<size_t> order(f->tensors_.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return spans[a].first < spans[b].first; });
  std::vector<TensorInfo> sorted;
  sorted.reserve(order.size());
  const TensorInfo* prev = nullptr;
  int64_t prev_end = 0;
  for (size_t i : order) {
    if (spans[i].second > spans[i].first) {
      GLM4_CHECK(prev == nullptr || spans[i].first >= prev_end, where(f->tensors_[i].name),
                 "data [", spans[i].first, ", ", spans[i].second, ") overlaps tensor '", prev->name,
                 "' which ends at ", prev_end);
      prev = &f->tensors_[i];
      prev_end = spans[i].second;
    }
  }
  for (size_t i : order) sorted.push_back(std::move(f->tensors_[i]));
  f->tensors_ = std::move(sorted);
  for (size_t i = 0; i < f->tensors_.size(); ++i) f->index_.emplace(f->tensors_[i].name, i);
  return f;
}

SafetensorsFile::~SafetensorsFile() = default;

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const TensorInfo& SafetensorsFile::at(std::string_view name) const {
  const TensorInfo* t = find(name);
  GLM4_CHECK(t != nullptr, "safetensors ", path_, ": no tensor '", name, "'");
  return *t;
}

namespace {

// Checks names, dtypes and sizes of the tensors to write; `data` too unless streamed.
void check_specs(const std::filesystem::path& path, const std::vector<TensorToWrite>& tensors,
                 bool streamed) {
  auto where = [&](const std::string& name) {
    return str_cat("write_safetensors ", path, ": tensor '", name, "': ");
  };
  std::set<std::string_view> names;
  for (const auto& t : tensors) {
    GLM4_CHECK(!t.name.empty() && t.name != "__metadata__", where(t.name), "invalid name");
    GLM4_CHECK(names.insert(t.name).second, where(t.name), "given twice");
    size_t elem = safetensors_dtype_size(t.dtype);
    GLM4_CHECK(elem > 0, where(t.name), "unknown dtype '", t.dtype, "'");
    int64_t numel = checked_numel(t.shape);
    uint64_t want;
    GLM4_CHECK(numel >= 0 && checked_nbytes(numel, elem, &want), where(t.name),
               "negative or too large shape");
    GLM4_CHECK(want == t.nbytes, where(t.name), "nbytes ", t.nbytes, " but shape and ", t.dtype,
               " need ", want);
    GLM4_CHECK(streamed || t.nbytes == 0 || t.data != nullptr, where(t.name), "data is null");
  }
}

// Counts what a producer writes into the file.
class CountingSink : public TensorSink {
 public:
  explicit CountingSink(AtomicFileWriter& out) : out_(out) {}
  void write(const void* data, size_t n) override {
    out_.write(data, n);
    written += n;
  }
  size_t written = 0;

 private:
  AtomicFileWriter& out_;
};

// Header, then each tensor in `order` through produce(index, sink).
void write_ordered(const std::filesystem::path& path, const std::vector<TensorToWrite>& tensors,
                   const std::vector<size_t>& order, const TensorProducer& produce,
                   const std::map<std::string, std::string>& metadata) {
  ojson header = ojson::object();
  if (!metadata.empty()) {
    ojson meta = ojson::object();
    for (const auto& [k, v] : metadata) meta[k] = v;
    header["__metadata__"] = std::move(meta);
  }
  uint64_t offset = 0;
  for (size_t i : order) {
    const auto& t = tensors[i];
    header[t.name] = {
        {"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.nbytes}}};
    offset += t.nbytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const ojson::exception& e) {
    fail("write_safetensors ", path, ": cannot encode header (names must be UTF-8): ", e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');

  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = (uint64_t(text.size()) >> (8 * i)) & 0xff;
  AtomicFileWriter out(path);
  out.write(len, 8);
  out.write(text);
  for (size_t i : order) {
    CountingSink sink(out);
    produce(i, sink);
    GLM4_CHECK(sink.written == tensors[i].nbytes, "write_safetensors ", path, ": tensor '",
               tensors[i].name, "' got ", sink.written, " bytes, expected ", tensors[i].nbytes);
  }
  out.commit();
}

}  // namespace

void write_safetensors(const std::filesystem::path& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  check_specs(path, tensors, false);
  // Largest elements first keeps every tensor aligned to its element size.
  std::vector<size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return safetensors_dtype_size(tensors[a].dtype) > safetensors_dtype_size(tensors[b].dtype);
  });
  write_ordered(
      path, tensors, order,
      [&](size_t i, TensorSink& sink) { sink.write(tensors[i].data, tensors[i].nbytes); },
      metadata);
}

void write_safetensors_streamed(const std::filesystem::path& path,
                                const std::vector<TensorToWrite>& specs,
                                const TensorProducer& produce,
                                const std::map<std::string, std::string>& metadata) {
  check_specs(path, specs, true);
  std::vector<size_t> order(specs.size());
  std::iota(order.begin(), order.end(), 0);
  write_ordered(path, specs, order, produce, metadata);
}

TensorToWrite f32_tensor(std::string name, std::vector<int64_t> shape, const float* data) {
  int64_t numel = checked_numel(shape);
  GLM4_CHECK(numel >= 0, "f32_tensor '", name, "': negative or too large shape");
  return {std::move(name), "F32", std::move(shape), data, size_t(numel) * 4};
}

std::vector<float> read_f32(const TensorInfo& t) {
  DType dt = t.float_dtype();
  size_t n = t.nbytes / dtype_size(dt);
  std::vector<float> out(n);
  if (dt == DType::F32) {
    if (n) std::memcpy(out.data(), t.data, n * 4);
    return out;
  }
  for (size_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, t.data + 2 * i, 2);
    out[i] = dt == DType::BF16 ? bf16_to_f32(h) : f16_to_f32(h);
  }
  return out;
}

std::vector<int64_t> read_int(const TensorInfo& t) {
  GLM4_CHECK(t.dtype == "I32" || t.dtype == "I64", "tensor '", t.name, "' has dtype ", t.dtype,
             "; expected I32 or I64");
  size_t elem = t.dtype == "I32" ? 4 : 8;
  size_t n = t.nbytes / elem;
  std::vector<int64_t> out(n);
  for (size_t i = 0; i < n; ++i) {
    if (elem == 4) {
      int32_t v;
      std::memcpy(&v, t.data + 4 * i, 4);
      out[i] = v;
    } else {
      std::memcpy(&out[i], t.data + 8 * i, 8);
    }
  }
  return out;
}

}  // namespace glm4
