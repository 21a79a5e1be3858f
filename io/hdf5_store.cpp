// HDF5 store over the C API; every failure becomes a glm4::Error naming the file and dataset.
#include "io/hdf5_store.h"

#include <hdf5.h>

#include <algorithm>

#include "base/check.h"
#include "io/file/atomic_file.h"
#include "io/hdf5_seal.h"

namespace glm4 {
namespace {

// Owns one HDF5 identifier; `close` is the matching H5?close.
class Handle {
 public:
  Handle(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~Handle() {
    if (id_ >= 0) close_(id_);
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

// HDF5 prints its error stack to stderr unless told not to; we report through exceptions.
// Also keeps libhdf5 from registering its exit handler, which closes the files still open: after
// a close that failed (a full disk) it faults there, turning the error into a crash. Every file
// here is closed by its owner, so nothing is left for it to do.
void silence_hdf5() {
  static const bool no_exit_handler = [] { return H5dont_atexit() >= 0; }();
  (void)no_exit_handler;
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}

// The most specific message on HDF5's error stack (then cleared), for our own error text.
std::string hdf5_detail() {
  std::string msg;
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_UPWARD,
      [](unsigned n, const H5E_error2_t* e, void* out) -> herr_t {
        if (n == 0 && e->desc) *static_cast<std::string*>(out) = e->desc;
        return 0;
      },
      &msg);
  H5Eclear2(H5E_DEFAULT);
  return msg.empty() ? "" : " (HDF5: " + msg + ")";
}

std::string normalize(const std::string& name) {
  size_t i = name.find_first_not_of('/');
  return i == std::string::npos ? "" : name.substr(i);
}

// True if every link on the way to `name` exists and `name` is a dataset.
bool dataset_exists(hid_t file, const std::string& name) {
  std::string path = normalize(name);
  if (path.empty()) return false;
  for (size_t pos = path.find('/');; pos = path.find('/', pos + 1)) {
    std::string prefix = path.substr(0, pos);
    if (prefix.empty() || H5Lexists(file, prefix.c_str(), H5P_DEFAULT) <= 0) {
      H5Eclear2(H5E_DEFAULT);
      return false;
    }
    if (pos == std::string::npos) break;
  }
  Handle obj(H5Oopen(file, path.c_str(), H5P_DEFAULT), H5Oclose);
  bool is_dataset = obj.ok() && H5Iget_type(obj.get()) == H5I_DATASET;
  H5Eclear2(H5E_DEFAULT);
  return is_dataset;
}

int64_t numel_of(const std::vector<int64_t>& shape, const std::filesystem::path& file,
                 const std::string& name) {
  int64_t n = 1;
  for (int64_t d : shape) {
    GLM4_CHECK(d >= 0 && !__builtin_mul_overflow(n, d, &n), "HDF5 ", file, ": dataset '", name,
               "': invalid shape dimension ", d);
  }
  return n;
}

}  // namespace

Hdf5Writer::Hdf5Writer(std::filesystem::path path)
    : path_(std::move(path)), tmp_(tmp_path_for(path_)) {
  silence_hdf5();
  Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  H5Pset_fclose_degree(fapl.get(), H5F_CLOSE_STRONG);
  Handle fcpl(H5Pcreate(H5P_FILE_CREATE), H5Pclose);
  H5Pset_userblock(fcpl.get(), kHdf5SealBytes);  // where commit() puts the checksum
  file_ = H5Fcreate(tmp_.c_str(), H5F_ACC_TRUNC, fcpl.get(), fapl.get());
  GLM4_CHECK(file_ >= 0, "HDF5 ", tmp_, ": cannot create", hdf5_detail());
}

Hdf5Writer::~Hdf5Writer() {
  if (file_ >= 0) {
    H5Fclose(file_);
    H5Eclear2(H5E_DEFAULT);
    std::error_code ec;
    std::filesystem::remove(tmp_, ec);
  }
}

void Hdf5Writer::write(const std::string& name, const std::vector<int64_t>& shape,
                       int64_t file_type, int64_t mem_type, const void* data) {
  GLM4_CHECK(file_ >= 0, "HDF5 ", path_, ": write of '", name, "' after commit");
  GLM4_CHECK(!normalize(name).empty(), "HDF5 ", path_, ": empty dataset name");
  int64_t n = numel_of(shape, path_, name);
  GLM4_CHECK(n == 0 || data != nullptr, "HDF5 ", path_, ": dataset '", name, "': data is null");
  GLM4_CHECK(!dataset_exists(file_, name), "HDF5 ", path_, ": dataset '", name, "' written twice");
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  Handle space(shape.empty() ? H5Screate(H5S_SCALAR)
                             : H5Screate_simple(int(dims.size()), dims.data(), nullptr),
               H5Sclose);
  Handle lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  Handle ds(
      H5Dcreate2(file_, name.c_str(), file_type, space.get(), lcpl.get(), H5P_DEFAULT, H5P_DEFAULT),
      H5Dclose);
  GLM4_CHECK(space.ok() && ds.ok(), "HDF5 ", path_, ": cannot create dataset '", name, "'",
             hdf5_detail());
  if (n > 0) {
    herr_t rc = H5Dwrite(ds.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
    GLM4_CHECK(rc >= 0, "HDF5 ", path_, ": cannot write dataset '", name, "'", hdf5_detail());
  }
}

void Hdf5Writer::write_f32(const std::string& name, const std::vector<int64_t>& shape,
                           const float* data) {
  write(name, shape, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, data);
}

void Hdf5Writer::write_i64(const std::string& name, const std::vector<int64_t>& shape,
                           const int64_t* data) {
  write(name, shape, H5T_STD_I64LE, H5T_NATIVE_INT64, data);
}

void Hdf5Writer::write_u8(const std::string& name, std::span<const uint8_t> bytes) {
  write(name, {int64_t(bytes.size())}, H5T_STD_U8LE, H5T_NATIVE_UINT8, bytes.data());
}

void Hdf5Writer::set_attr_raw(const std::string& name, int64_t type, const void* value) {
  GLM4_CHECK(file_ >= 0, "HDF5 ", path_, ": attribute '", name, "' set after commit");
  if (H5Aexists(file_, name.c_str()) > 0) H5Adelete(file_, name.c_str());
  Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  Handle attr(H5Acreate2(file_, name.c_str(), type, space.get(), H5P_DEFAULT, H5P_DEFAULT),
              H5Aclose);
  GLM4_CHECK(attr.ok() && H5Awrite(attr.get(), type, value) >= 0, "HDF5 ", path_,
             ": cannot write attribute '", name, "'", hdf5_detail());
}

void Hdf5Writer::set_attr(const std::string& name, const std::string& value) {
  GLM4_CHECK(value.find('\0') == std::string::npos, "HDF5 ", path_, ": attribute '", name,
             "' holds a NUL byte; store binary data with write_u8");
  // Fixed-length (the reader refuses variable-length strings: see Hdf5Reader::attr). An
  // attribute lives in its object's header, which holds at most 64 KiB.
  GLM4_CHECK(value.size() < kMaxHdf5StringAttrBytes, "HDF5 ", path_, ": attribute '", name,
             "' holds ", value.size(),
             " bytes (limit kMaxHdf5StringAttrBytes = ", kMaxHdf5StringAttrBytes, ")");
  Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type.get(), value.size() + 1);
  H5Tset_strpad(type.get(), H5T_STR_NULLTERM);
  H5Tset_cset(type.get(), H5T_CSET_UTF8);
  set_attr_raw(name, type.get(), value.c_str());
}

void Hdf5Writer::set_attr_i64(const std::string& name, int64_t value) {
  set_attr_raw(name, H5T_NATIVE_INT64, &value);
}

void Hdf5Writer::commit() {
  GLM4_CHECK(file_ >= 0, "HDF5 ", path_, ": committed twice");
  herr_t rc = H5Fclose(file_);
  file_ = -1;
  if (rc < 0) {
    std::string detail = hdf5_detail();
    std::error_code ec;
    std::filesystem::remove(tmp_, ec);
    fail("HDF5 ", tmp_, ": cannot close", detail);
  }
  seal_hdf5_file(tmp_);
  sync_and_rename(tmp_, path_);
}

Hdf5Reader::Hdf5Reader(std::filesystem::path path) : path_(std::move(path)) {
  silence_hdf5();
  std::error_code ec;
  GLM4_CHECK(std::filesystem::is_regular_file(path_, ec), "HDF5 ", path_, ": no such file");
  check_hdf5_seal(path_);  // before libhdf5 reads anything: see hdf5_seal.h
  htri_t is_h5 = H5Fis_hdf5(path_.c_str());
  H5Eclear2(H5E_DEFAULT);
  GLM4_CHECK(is_h5 > 0, "HDF5 ", path_, ": not an HDF5 file");
  file_bytes_ = std::filesystem::file_size(path_, ec);
  GLM4_CHECK(!ec, "HDF5 ", path_, ": cannot read its size: ", ec.message());
  file_ = H5Fopen(path_.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  GLM4_CHECK(file_ >= 0, "HDF5 ", path_, ": cannot open", hdf5_detail());
}

Hdf5Reader::~Hdf5Reader() {
  if (file_ >= 0) H5Fclose(file_);
}

bool Hdf5Reader::has(const std::string& name) const { return dataset_exists(file_, name); }

std::vector<int64_t> Hdf5Reader::shape(const std::string& name) const {
  GLM4_CHECK(has(name), "HDF5 ", path_, ": no dataset '", name, "'");
  Handle ds(H5Dopen2(file_, name.c_str(), H5P_DEFAULT), H5Dclose);
  Handle space(ds.ok() ? H5Dget_space(ds.get()) : -1, H5Sclose);
  int rank = space.ok() ? H5Sget_simple_extent_ndims(space.get()) : -1;
  GLM4_CHECK(rank >= 0, "HDF5 ", path_, ": cannot read the shape of '", name, "'", hdf5_detail());
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  return std::vector<int64_t>(dims.begin(), dims.end());
}

template <typename T>
std::vector<T> Hdf5Reader::read(const std::string& name, int cls, size_t size, bool is_signed,
                                int64_t mem_type, const char* what) const {
  std::vector<int64_t> dims = shape(name);
  Handle ds(H5Dopen2(file_, name.c_str(), H5P_DEFAULT), H5Dclose);
  Handle type(H5Dget_type(ds.get()), H5Tclose);
  bool match = type.ok() && H5Tget_class(type.get()) == cls && H5Tget_size(type.get()) == size &&
               (cls != H5T_INTEGER || (H5Tget_sign(type.get()) == H5T_SGN_2) == is_signed);
  GLM4_CHECK(match, "HDF5 ", path_, ": dataset '", name, "' is not stored as ", what);
  const int64_t n = numel_of(dims, path_, name);
  uint64_t bytes = 0;
  GLM4_CHECK(!__builtin_mul_overflow(uint64_t(n), uint64_t(size), &bytes) && bytes <= file_bytes_,
             "HDF5 ", path_, ": dataset '", name, "' declares ", n, " elements of ", size,
             " bytes, more than the file's ", file_bytes_,
             " bytes (datasets are stored uncompressed)");
  std::vector<T> out(static_cast<size_t>(n));
  if (!out.empty()) {
    herr_t rc = H5Dread(ds.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data());
    GLM4_CHECK(rc >= 0, "HDF5 ", path_, ": cannot read dataset '", name, "'", hdf5_detail());
  }
  return out;
}

std::vector<float> Hdf5Reader::read_f32(const std::string& name) const {
  return read<float>(name, H5T_FLOAT, 4, true, H5T_NATIVE_FLOAT, "f32");
}

std::vector<int64_t> Hdf5Reader::read_i64(const std::string& name) const {
  return read<int64_t>(name, H5T_INTEGER, 8, true, H5T_NATIVE_INT64, "i64");
}

std::vector<uint8_t> Hdf5Reader::read_u8(const std::string& name) const {
  return read<uint8_t>(name, H5T_INTEGER, 1, false, H5T_NATIVE_UINT8, "u8");
}

bool Hdf5Reader::has_attr(const std::string& name) const {
  htri_t e = H5Aexists(file_, name.c_str());
  H5Eclear2(H5E_DEFAULT);
  return e > 0;
}

std::string Hdf5Reader::attr(const std::string& name) const {
  GLM4_CHECK(has_attr(name), "HDF5 ", path_, ": no attribute '", name, "'");
  Handle a(H5Aopen(file_, name.c_str(), H5P_DEFAULT), H5Aclose);
  Handle type(a.ok() ? H5Aget_type(a.get()) : -1, H5Tclose);
  GLM4_CHECK(type.ok() && H5Tget_class(type.get()) == H5T_STRING, "HDF5 ", path_, ": attribute '",
             name, "' is not a string");
  Handle mem(H5Tcopy(type.get()), H5Tclose);
  // Variable-length strings live in the file's global heap, and libhdf5 (1.10) loops forever on
  // a corrupt one (found by fuzz_training_state): only fixed-length strings are read.
  GLM4_CHECK(H5Tis_variable_str(type.get()) == 0, "HDF5 ", path_, ": attribute '", name,
             "' is a variable-length string; glm4 reads only fixed-length strings");
  const size_t fixed = H5Tget_size(type.get());
  GLM4_CHECK(fixed <= kMaxHdf5StringAttrBytes && fixed <= file_bytes_, "HDF5 ", path_,
             ": attribute '", name, "' declares ", fixed,
             " bytes (limit kMaxHdf5StringAttrBytes = ", kMaxHdf5StringAttrBytes,
             ", and at most the file's ", file_bytes_, ")");
  std::string s(fixed, '\0');
  GLM4_CHECK(H5Aread(a.get(), mem.get(), s.data()) >= 0, "HDF5 ", path_,
             ": cannot read attribute '", name, "'", hdf5_detail());
  s.resize(std::min(s.size(), s.find('\0')));  // drop NUL padding
  return s;
}

int64_t Hdf5Reader::attr_i64(const std::string& name) const {
  GLM4_CHECK(has_attr(name), "HDF5 ", path_, ": no attribute '", name, "'");
  Handle a(H5Aopen(file_, name.c_str(), H5P_DEFAULT), H5Aclose);
  Handle type(a.ok() ? H5Aget_type(a.get()) : -1, H5Tclose);
  GLM4_CHECK(type.ok() && H5Tget_class(type.get()) == H5T_INTEGER, "HDF5 ", path_, ": attribute '",
             name, "' is not an integer");
  int64_t v = 0;
  GLM4_CHECK(H5Aread(a.get(), H5T_NATIVE_INT64, &v) >= 0, "HDF5 ", path_,
             ": cannot read attribute '", name, "'", hdf5_detail());
  return v;
}

std::vector<std::string> Hdf5Reader::names() const {
  std::vector<std::string> out;
  auto visit = [](hid_t group, const char* name, const H5L_info_t* info, void* data) -> herr_t {
    if (info->type != H5L_TYPE_HARD) return 0;
    Handle obj(H5Oopen(group, name, H5P_DEFAULT), H5Oclose);
    if (obj.ok() && H5Iget_type(obj.get()) == H5I_DATASET)
      static_cast<std::vector<std::string>*>(data)->push_back(name);
    return 0;
  };
  herr_t rc = H5Lvisit(file_, H5_INDEX_NAME, H5_ITER_INC, visit, &out);
  GLM4_CHECK(rc >= 0, "HDF5 ", path_, ": cannot list datasets", hdf5_detail());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace glm4
