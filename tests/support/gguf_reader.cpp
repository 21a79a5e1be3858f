// GGUF parsing with a cursor that refuses to read past the end of the file: header, metadata,
// tensor infos, alignment, then each tensor's extent inside the data section.
#include "tests/support/gguf_reader.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/check.h"
#include "export/ggml_quants.h"

namespace glm4 {

class GgufParser {
 public:
  GgufParser(GgufFile& f, const uint8_t* base, size_t size) : f_(f), base_(base), size_(size) {}

  void parse() {
    need(4, "magic");
    const uint32_t magic = get<uint32_t>("magic");
    GLM4_CHECK(magic == kGgufMagic, where("magic"), "not a GGUF file (first bytes are not 'GGUF')");
    f_.version_ = get<uint32_t>("version");
    GLM4_CHECK(f_.version_ == 2 || f_.version_ == 3, where("version"), "version ", f_.version_,
               " is not supported (2 or 3)");
    const uint64_t n_tensors = get<uint64_t>("tensor_count");
    const uint64_t n_kv = get<uint64_t>("metadata_kv_count");
    GLM4_CHECK(n_kv <= kMaxGgufKeyValues, where("metadata_kv_count"), n_kv,
               " key/values exceed the limit kMaxGgufKeyValues = ", kMaxGgufKeyValues);
    GLM4_CHECK(n_tensors <= kMaxGgufTensors, where("tensor_count"), n_tensors,
               " tensors exceed the limit kMaxGgufTensors = ", kMaxGgufTensors);
    // A key/value takes at least 8 (key length) + 4 (type) + 1 bytes, a tensor info 8 + 4 + 8 + 4
    // + 8.
    GLM4_CHECK(n_kv <= left() / 13, where("metadata_kv_count"), n_kv,
               " key/values cannot fit in the ", left(), " bytes left");
    GLM4_CHECK(n_tensors <= left() / 32, where("tensor_count"), n_tensors,
               " tensor infos cannot fit in the ", left(), " bytes left");

    for (uint64_t k = 0; k < n_kv; ++k) {
      const std::string field = str_cat("kv[", k, "]");
      std::string key = get_string(field + " key");
      GLM4_CHECK(!f_.kv_index_.count(key), where(field), "key '", key, "' appears twice");
      const uint32_t type = get<uint32_t>(field + " '" + key + "' type");
      GLM4_CHECK(gguf_type_valid(type), where(field), "key '", key, "' has unknown value type ",
                 type);
      GgufValue v = get_value(GgufType(type), field + " '" + key + "'", 0);
      f_.kv_index_.emplace(key, f_.kvs_.size());
      f_.kvs_.emplace_back(std::move(key), std::move(v));
    }
    if (const GgufValue* a = f_.find("general.alignment")) {
      GLM4_CHECK(a->type == GgufType::U32, where("general.alignment"), "has type ",
                 gguf_type_name(a->type), ", expected uint32");
      GLM4_CHECK(a->u > 0 && (a->u & (a->u - 1)) == 0, where("general.alignment"), a->u,
                 " is not a power of two");
      f_.alignment_ = uint32_t(a->u);
    }

    for (uint64_t k = 0; k < n_tensors; ++k) {
      GgufTensorInfo t;
      t.name = get_string(str_cat("tensor_infos[", k, "].name"));
      const std::string field = str_cat("tensor '", t.name, "'");
      GLM4_CHECK(!f_.tensor_index_.count(t.name), where(field), "name appears twice");
      const uint32_t n_dims = get<uint32_t>(field + " n_dims");
      GLM4_CHECK(n_dims >= 1 && n_dims <= uint32_t(kGgmlMaxDims), where(field + " n_dims"), n_dims,
                 " (1 to ", kGgmlMaxDims, " allowed)");
      int64_t count = 1;  // every partial product must fit, so numel() never overflows
      for (uint32_t d = 0; d < n_dims; ++d) {
        const uint64_t dim = get<uint64_t>(str_cat(field, " ne[", d, "]"));
        GLM4_CHECK(dim <= uint64_t(INT64_MAX), where(str_cat(field, " ne[", d, "]")), dim,
                   " is too large");
        t.ne.push_back(int64_t(dim));
        GLM4_CHECK(!__builtin_mul_overflow(count, int64_t(dim), &count),
                   where(str_cat(field, " ne[", d, "]")), "the element count overflows 64 bits");
      }
      const uint32_t type = get<uint32_t>(field + " type");
      GLM4_CHECK(ggml_type_known(type), where(field + " type"), "ggml type ", type,
                 " is not supported (f32, f16, bf16, q8_0, q4_0)");
      t.type = GgmlType(type);
      GLM4_CHECK(t.ne[0] % ggml_block_size(t.type) == 0, where(field + " ne[0]"), t.ne[0],
                 " is not a multiple of the ", ggml_type_name(t.type), " block (",
                 ggml_block_size(t.type), ")");
      t.offset = get<uint64_t>(field + " offset");
      GLM4_CHECK(t.offset % f_.alignment_ == 0, where(field + " offset"), t.offset,
                 " is not a multiple of the alignment ", f_.alignment_);
      f_.tensor_index_.emplace(t.name, f_.tensors_.size());
      f_.tensors_.push_back(std::move(t));
    }

    const uint64_t data_start = (pos_ + f_.alignment_ - 1) / f_.alignment_ * f_.alignment_;
    GLM4_CHECK(data_start <= size_ || f_.tensors_.empty(), where("data section"), "starts at byte ",
               data_start, ", past the end of the file (", size_, " bytes): truncated?");
    f_.data_offset_ = data_start;
    const uint64_t data_size = data_start <= size_ ? size_ - data_start : 0;

    std::vector<std::pair<uint64_t, size_t>> spans;  // (offset, tensor) to find overlaps
    for (size_t k = 0; k < f_.tensors_.size(); ++k) {
      GgufTensorInfo& t = f_.tensors_[k];
      const std::string field = str_cat("tensor '", t.name, "'");
      uint64_t nbytes = ggml_row_bytes(t.type, t.ne[0]);
      for (size_t d = 1; d < t.ne.size(); ++d) {
        GLM4_CHECK(!__builtin_mul_overflow(nbytes, uint64_t(t.ne[d]), &nbytes), where(field),
                   "size overflows 64 bits");
      }
      GLM4_CHECK(t.offset <= data_size && nbytes <= data_size - t.offset, where(field + " offset"),
                 "data [", t.offset, ", ", t.offset + nbytes, ") runs past the data section (",
                 data_size, " bytes): truncated?");
      t.nbytes = nbytes;
      t.data = base_ + data_start + t.offset;
      if (nbytes > 0) spans.emplace_back(t.offset, k);
    }
    std::sort(spans.begin(), spans.end());
    for (size_t k = 1; k < spans.size(); ++k) {
      const GgufTensorInfo& a = f_.tensors_[spans[k - 1].second];
      const GgufTensorInfo& b = f_.tensors_[spans[k].second];
      GLM4_CHECK(b.offset >= a.offset + a.nbytes, where(str_cat("tensor '", b.name, "' offset")),
                 "data overlaps tensor '", a.name, "'");
    }
  }

 private:
  std::string where(const std::string& field) const {
    return str_cat("gguf ", f_.path_, ": ", field, ": ");
  }
  uint64_t left() const { return size_ - pos_; }
  void need(uint64_t n, const std::string& field) const {
    GLM4_CHECK(n <= left(), where(field), "needs ", n, " bytes at byte ", pos_,
               " but the file has ", size_, ": truncated?");
  }
  template <typename T>
  T get(const std::string& field) {
    need(sizeof(T), field);
    T v;
    std::memcpy(&v, base_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string get_string(const std::string& field) {
    const uint64_t n = get<uint64_t>(field + " length");
    GLM4_CHECK(n <= kMaxGgufStringBytes, where(field), "string length ", n,
               " exceeds the limit kMaxGgufStringBytes = ", kMaxGgufStringBytes);
    GLM4_CHECK(n <= left(), where(field), "string length ", n, " runs past the end of the file (",
               left(), " bytes left): truncated or corrupt");
    std::string s(reinterpret_cast<const char*>(base_ + pos_), size_t(n));
    pos_ += n;
    return s;
  }

  GgufValue get_value(GgufType type, const std::string& field, int depth) {
    switch (type) {
      case GgufType::U8:
        return GgufValue::scalar(type, get<uint8_t>(field), 0, 0);
      case GgufType::I8:
        return GgufValue::scalar(type, 0, get<int8_t>(field), 0);
      case GgufType::U16:
        return GgufValue::scalar(type, get<uint16_t>(field), 0, 0);
      case GgufType::I16:
        return GgufValue::scalar(type, 0, get<int16_t>(field), 0);
      case GgufType::U32:
        return GgufValue::scalar(type, get<uint32_t>(field), 0, 0);
      case GgufType::I32:
        return GgufValue::scalar(type, 0, get<int32_t>(field), 0);
      case GgufType::F32:
        return GgufValue::scalar(type, 0, 0, get<float>(field));
      case GgufType::U64:
        return GgufValue::scalar(type, get<uint64_t>(field), 0, 0);
      case GgufType::I64:
        return GgufValue::scalar(type, 0, get<int64_t>(field), 0);
      case GgufType::F64:
        return GgufValue::scalar(type, 0, 0, get<double>(field));
      case GgufType::Bool: {
        const uint8_t b = get<uint8_t>(field);
        GLM4_CHECK(b <= 1, where(field), "bool byte is ", int(b), ", expected 0 or 1");
        return GgufValue::of_bool(b != 0);
      }
      case GgufType::String:
        return GgufValue::of_string(get_string(field));
      case GgufType::Array: {
        GLM4_CHECK(depth < 8, where(field), "arrays nested more than 8 deep");
        const uint32_t elem = get<uint32_t>(field + " element type");
        GLM4_CHECK(gguf_type_valid(elem), where(field), "array element type ", elem, " is unknown");
        const uint64_t n = get<uint64_t>(field + " array length");
        GLM4_CHECK(n <= kMaxGgufArrayLength, where(field), "array length ", n,
                   " exceeds the limit kMaxGgufArrayLength = ", kMaxGgufArrayLength);
        const size_t scalar = gguf_scalar_size(GgufType(elem));
        const uint64_t min_size = scalar > 0 ? scalar : elem == uint32_t(GgufType::Array) ? 12 : 8;
        GLM4_CHECK(n <= left() / min_size, where(field), "array length ", n, " of ",
                   gguf_type_name(GgufType(elem)), " cannot fit in the ", left(), " bytes left");
        std::vector<GgufValue> items;
        items.reserve(size_t(n));
        for (uint64_t k = 0; k < n; ++k)
          items.push_back(get_value(GgufType(elem), str_cat(field, " item ", k), depth + 1));
        return GgufValue::array(GgufType(elem), std::move(items));
      }
    }
    fail(where(field), "unknown value type ", uint32_t(type));
  }

  GgufFile& f_;
  const uint8_t* base_;
  size_t size_;
  uint64_t pos_ = 0;
};

int64_t GgufTensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  return n;
}

std::vector<float> GgufTensorInfo::to_f32() const {
  std::vector<float> out(static_cast<size_t>(numel()));
  ggml_decode(type, data, numel(), out.data());
  return out;
}

std::shared_ptr<GgufFile> GgufFile::open(const std::filesystem::path& path) {
  std::shared_ptr<GgufFile> f(new GgufFile());
  f->path_ = path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  GLM4_CHECK(fd >= 0, "gguf ", path, ": cannot open: ", std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("gguf ", path, ": not a regular file");
  }
  f->size_ = size_t(st.st_size);
  if (f->size_ > 0) {
    void* base = ::mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    const int err = errno;
    ::close(fd);
    GLM4_CHECK(base != MAP_FAILED, "gguf ", path, ": cannot mmap: ", std::strerror(err));
    f->map_ = base;
  } else {
    ::close(fd);
  }
  GgufParser(*f, static_cast<const uint8_t*>(f->map_), f->size_).parse();
  return f;
}

GgufFile::~GgufFile() {
  if (map_) ::munmap(map_, size_);
}

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = kv_index_.find(std::string(key));
  return it == kv_index_.end() ? nullptr : &kvs_[it->second].second;
}

const GgufValue& GgufFile::at(std::string_view key, GgufType type) const {
  const GgufValue* v = find(key);
  GLM4_CHECK(v != nullptr, "gguf ", path_, ": no metadata key '", key, "'");
  GLM4_CHECK(v->type == type, "gguf ", path_, ": key '", key, "' is ", gguf_type_name(v->type),
             ", expected ", gguf_type_name(type));
  return *v;
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(std::string(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const GgufTensorInfo& GgufFile::tensor(std::string_view name) const {
  const GgufTensorInfo* t = find_tensor(name);
  GLM4_CHECK(t != nullptr, "gguf ", path_, ": no tensor '", name, "'");
  return *t;
}

}  // namespace glm4
