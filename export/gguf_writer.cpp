// GGUF serialisation: little-endian scalars, u64-length strings, typed arrays, aligned data.
#include "export/gguf_writer.h"

#include <algorithm>
#include <cstring>

#include "base/check.h"
#include "export/ggml_quants.h"
#include "io/file/atomic_file.h"

namespace glm4 {
namespace {

// Accumulates the header in memory (it is small next to the data).
class Bytes {
 public:
  template <typename T>
  void put(T v) {
    static_assert(std::is_trivially_copyable_v<T>);
    const size_t at = buf_.size();
    buf_.resize(at + sizeof(T));
    std::memcpy(buf_.data() + at, &v, sizeof(T));  // x86-64 and aarch64 are little-endian
  }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    buf_.insert(buf_.end(), s.begin(), s.end());
  }
  void pad_to(uint32_t alignment) {
    while (buf_.size() % alignment != 0) buf_.push_back(0);
  }
  const std::string& str() const { return buf_; }

 private:
  std::string buf_;
};

void put_value(Bytes& out, const GgufValue& v, const std::string& key) {
  switch (v.type) {
    case GgufType::U8:
      out.put<uint8_t>(uint8_t(v.u));
      return;
    case GgufType::I8:
      out.put<int8_t>(int8_t(v.i));
      return;
    case GgufType::U16:
      out.put<uint16_t>(uint16_t(v.u));
      return;
    case GgufType::I16:
      out.put<int16_t>(int16_t(v.i));
      return;
    case GgufType::U32:
      out.put<uint32_t>(uint32_t(v.u));
      return;
    case GgufType::I32:
      out.put<int32_t>(int32_t(v.i));
      return;
    case GgufType::F32:
      out.put<float>(float(v.f));
      return;
    case GgufType::Bool:
      out.put<uint8_t>(v.b ? 1 : 0);
      return;
    case GgufType::String:
      out.put_string(v.s);
      return;
    case GgufType::U64:
      out.put<uint64_t>(v.u);
      return;
    case GgufType::I64:
      out.put<int64_t>(v.i);
      return;
    case GgufType::F64:
      out.put<double>(v.f);
      return;
    case GgufType::Array:
      out.put<uint32_t>(uint32_t(v.elem));
      out.put<uint64_t>(v.items.size());
      for (const GgufValue& item : v.items) {
        GLM4_CHECK(item.type == v.elem, "gguf key '", key, "': array of ", gguf_type_name(v.elem),
                   " holds a ", gguf_type_name(item.type));
        put_value(out, item, key);
      }
      return;
  }
  fail("gguf key '", key, "': unknown value type ", uint32_t(v.type));
}

uint64_t align_up(uint64_t n, uint32_t alignment) {
  return (n + alignment - 1) / alignment * alignment;
}

}  // namespace

uint64_t ggml_nbytes(GgmlType t, const std::vector<int64_t>& ne) {
  uint64_t n = ggml_row_bytes(t, ne.empty() ? 1 : ne[0]);
  for (size_t d = 1; d < ne.size(); ++d) n *= uint64_t(ne[d]);
  return n;
}

GgufWriter::GgufWriter(uint32_t alignment) : alignment_(alignment) {
  GLM4_CHECK(alignment > 0 && (alignment & (alignment - 1)) == 0, "gguf: alignment ", alignment,
             " is not a power of two");
  if (alignment != kGgufDefaultAlignment) set("general.alignment", GgufValue::of_u32(alignment));
}

bool GgufWriter::has(const std::string& key) const {
  for (const auto& [k, v] : kvs_)
    if (k == key) return true;
  return false;
}

void GgufWriter::set(const std::string& key, GgufValue value) {
  GLM4_CHECK(!key.empty(), "gguf: empty metadata key");
  GLM4_CHECK(!has(key), "gguf: metadata key '", key, "' set twice");
  kvs_.emplace_back(key, std::move(value));
}

void GgufWriter::add_tensor(const std::string& name, std::vector<int64_t> ne, GgmlType type,
                            Producer bytes) {
  for (const Tensor& t : tensors_)
    GLM4_CHECK(t.name != name, "gguf: tensor '", name, "' added twice");
  GLM4_CHECK(!ne.empty() && ne.size() <= size_t(kGgmlMaxDims), "gguf: tensor '", name, "' has ",
             ne.size(), " dims (1 to ", kGgmlMaxDims, " allowed)");
  for (int64_t d : ne) GLM4_CHECK(d >= 0, "gguf: tensor '", name, "' has a negative dim ", d);
  GLM4_CHECK(ne[0] % ggml_block_size(type) == 0, "gguf: tensor '", name, "': rows of ", ne[0],
             " values cannot be stored as ", ggml_type_name(type), " (blocks of ",
             ggml_block_size(type), ")");
  const uint64_t nbytes = ggml_nbytes(type, ne);
  tensors_.push_back({name, std::move(ne), type, nbytes, std::move(bytes)});
}

void GgufWriter::write(const std::filesystem::path& path) const {
  Bytes head;
  head.put<uint32_t>(kGgufMagic);
  head.put<uint32_t>(kGgufVersion);
  head.put<uint64_t>(tensors_.size());
  head.put<uint64_t>(kvs_.size());
  for (const auto& [key, value] : kvs_) {
    head.put_string(key);
    head.put<uint32_t>(uint32_t(value.type));
    put_value(head, value, key);
  }
  uint64_t offset = 0;  // from the start of the data section
  for (const Tensor& t : tensors_) {
    head.put_string(t.name);
    head.put<uint32_t>(uint32_t(t.ne.size()));
    for (int64_t d : t.ne) head.put<uint64_t>(uint64_t(d));
    head.put<uint32_t>(uint32_t(t.type));
    head.put<uint64_t>(offset);
    offset = align_up(offset + t.nbytes, alignment_);
  }
  head.pad_to(alignment_);

  AtomicFileWriter out(path);
  out.write(head.str());
  static const char zeros[256] = {};
  for (const Tensor& t : tensors_) {
    const std::vector<uint8_t> data = t.bytes();
    GLM4_CHECK(data.size() == t.nbytes, "gguf ", path, ": tensor '", t.name, "' produced ",
               data.size(), " bytes, its dims and type need ", t.nbytes);
    out.write(data.data(), data.size());
    const uint64_t pad = align_up(t.nbytes, alignment_) - t.nbytes;
    for (uint64_t left = pad; left > 0;) {
      const size_t n = size_t(std::min<uint64_t>(left, sizeof(zeros)));
      out.write(zeros, n);
      left -= n;
    }
  }
  out.commit();
}

}  // namespace glm4
