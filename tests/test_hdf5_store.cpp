// HDF5 store: round trips of every dataset kind and attribute, nested names, atomic commit,
// and errors that name the file and dataset.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <fstream>
#include <numeric>

#include "io/hdf5_seal.h"
#include "io/hdf5_store.h"
#include "tests/support/temp_dir.h"

namespace glm4 {
namespace {

using testing::TempDir;
using testing::throws_with;

// A file made with the raw HDF5 API as another program would, with the user block that
// seal_hdf5_file fills (Hdf5Reader reads only sealed files).
hid_t create_with_user_block(const std::string& path) {
  hid_t fcpl = H5Pcreate(H5P_FILE_CREATE);
  H5Pset_userblock(fcpl, kHdf5SealBytes);
  hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, fcpl, H5P_DEFAULT);
  H5Pclose(fcpl);
  return file;
}

// Found by fuzz_training_state: libhdf5 loops forever or overflows the heap on corrupt files,
// so the reader checks glm4's checksum first. A flipped byte, a cut and a foreign file are each
// refused by it, naming the file.
TEST(Hdf5Store, ChecksumGuardsEveryByteBeforeLibhdf5ReadsIt) {
  TempDir dir;
  std::vector<float> v(1000, 2.0f);
  {
    Hdf5Writer out(dir / "s.h5");
    out.write_f32("w", {1000}, v.data());
    out.set_attr("config", "{}");
    out.commit();
  }
  EXPECT_EQ(Hdf5Reader(dir / "s.h5").read_f32("w"), v);
  std::string bytes;
  {
    std::ifstream in(dir / "s.h5", std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  auto write = [&](const std::string& name, const std::string& content) {
    std::ofstream(dir / name, std::ios::binary) << content;
    return dir / name;
  };
  for (size_t at : {kHdf5SealBytes, kHdf5SealBytes + 100, bytes.size() / 2, bytes.size() - 1}) {
    std::string flipped = bytes;
    flipped[at] = char(flipped[at] ^ 0x10);
    EXPECT_TRUE(throws_with([&] { Hdf5Reader r(write("flip.h5", flipped)); },
                            {"flip.h5", "checksum mismatch"}))
        << "byte " << at;
  }
  EXPECT_TRUE(throws_with([&] { Hdf5Reader r(write("cut.h5", bytes.substr(0, bytes.size() - 8))); },
                          {"cut.h5", "truncated"}));
  std::string unsealed = bytes;
  std::fill(unsealed.begin(), unsealed.begin() + 8, '\0');
  EXPECT_TRUE(throws_with([&] { Hdf5Reader r(write("plain.h5", unsealed)); },
                          {"plain.h5", "no checksum block"}));
}

TEST(Hdf5Store, RoundTripsDatasetsAndAttributes) {
  TempDir dir;
  std::vector<float> w(2 * 3 * 4);
  std::iota(w.begin(), w.end(), -5.5f);
  std::vector<int64_t> ids = {INT64_MIN, -1, 0, INT64_MAX};
  std::vector<uint8_t> rng = {0, 1, 254, 255, 7};
  const std::string config =
      R"({"lr": 1e-4, "note": "ünïcode"})" + std::string(50000, 'x');  // < kMaxHdf5StringAttrBytes
  float scalar = 3.25f;
  {
    Hdf5Writer out(dir / "c.h5");
    out.write_f32("params/model.layers.0.q_proj.lora_A", {2, 3, 4}, w.data());
    out.write_f32("adam/m/deep/er/x", {4}, w.data());
    out.write_f32("scalar", {}, &scalar);
    out.write_f32("empty", {0, 3}, nullptr);
    out.write_i64("cursor", {2, 2}, ids.data());
    out.write_u8("rng_state", rng);
    out.write_u8("no_bytes", {});
    out.set_attr("config", config);
    out.set_attr("empty_attr", "");
    out.set_attr_i64("step", 1234567890123LL);
    out.set_attr_i64("format_version", 1);
    out.set_attr_i64("format_version", 2);  // setting again overwrites
    out.commit();
  }
  EXPECT_EQ(dir.list(), std::vector<std::string>{"c.h5"});  // no .tmp left behind

  Hdf5Reader in(dir / "c.h5");
  EXPECT_EQ(in.names(), (std::vector<std::string>{"adam/m/deep/er/x", "cursor", "empty", "no_bytes",
                                                  "params/model.layers.0.q_proj.lora_A",
                                                  "rng_state", "scalar"}));
  EXPECT_TRUE(in.has("params/model.layers.0.q_proj.lora_A"));
  EXPECT_TRUE(in.has("/cursor"));
  EXPECT_FALSE(in.has("params"));  // a group, not a dataset
  EXPECT_FALSE(in.has("params/missing/deeper"));
  EXPECT_FALSE(in.has(""));
  EXPECT_EQ(in.shape("params/model.layers.0.q_proj.lora_A"), (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(in.read_f32("params/model.layers.0.q_proj.lora_A"), w);
  EXPECT_EQ(in.read_f32("adam/m/deep/er/x"), std::vector<float>(w.begin(), w.begin() + 4));
  EXPECT_EQ(in.shape("scalar"), std::vector<int64_t>{});
  EXPECT_EQ(in.read_f32("scalar"), std::vector<float>{scalar});
  EXPECT_EQ(in.shape("empty"), (std::vector<int64_t>{0, 3}));
  EXPECT_TRUE(in.read_f32("empty").empty());
  EXPECT_EQ(in.read_i64("cursor"), ids);
  EXPECT_EQ(in.read_u8("rng_state"), rng);
  EXPECT_TRUE(in.read_u8("no_bytes").empty());
  EXPECT_EQ(in.attr("config"), config);
  EXPECT_EQ(in.attr("empty_attr"), "");
  EXPECT_EQ(in.attr_i64("step"), 1234567890123LL);
  EXPECT_EQ(in.attr_i64("format_version"), 2);
  EXPECT_TRUE(in.has_attr("step"));
  EXPECT_FALSE(in.has_attr("nope"));
}

TEST(Hdf5Store, ErrorsNameTheFileAndDataset) {
  TempDir dir;
  float x = 1.0f;
  {
    Hdf5Writer out(dir / "e.h5");
    out.write_f32("a/x", {1}, &x);
    out.set_attr_i64("n", 3);
    out.set_attr("s", "text");
    EXPECT_TRUE(throws_with([&] { out.write_f32("a/x", {1}, &x); }, {"e.h5", "'a/x'", "twice"}));
    EXPECT_TRUE(throws_with([&] { out.write_f32("b", {-2}, &x); }, {"e.h5", "'b'", "-2"}));
    EXPECT_TRUE(throws_with([&] { out.write_f32("c", {2}, nullptr); }, {"'c'", "null"}));
    EXPECT_TRUE(
        throws_with([&] { out.write_f32("a", {1}, &x); }, {"e.h5", "'a'", "cannot create"}));
    EXPECT_TRUE(
        throws_with([&] { out.set_attr("bin", std::string("a\0b", 3)); }, {"'bin'", "NUL"}));
    out.commit();
    EXPECT_TRUE(throws_with([&] { out.commit(); }, {"twice"}));
  }
  Hdf5Reader in(dir / "e.h5");
  EXPECT_TRUE(throws_with([&] { in.read_f32("a/y"); }, {"e.h5", "no dataset 'a/y'"}));
  EXPECT_TRUE(throws_with([&] { in.shape("zz/top"); }, {"e.h5", "'zz/top'"}));
  EXPECT_TRUE(throws_with([&] { in.read_i64("a/x"); }, {"e.h5", "'a/x'", "not stored as i64"}));
  EXPECT_TRUE(throws_with([&] { in.read_u8("a/x"); }, {"'a/x'", "not stored as u8"}));
  EXPECT_TRUE(throws_with([&] { in.attr("missing"); }, {"e.h5", "no attribute 'missing'"}));
  EXPECT_TRUE(throws_with([&] { in.attr("n"); }, {"'n'", "not a string"}));
  EXPECT_TRUE(throws_with([&] { in.attr_i64("s"); }, {"'s'", "not an integer"}));
}

TEST(Hdf5Store, RejectsFilesThatAreNotHdf5) {
  TempDir dir;
  std::ofstream(dir / "text.h5") << "definitely not hdf5\n";
  EXPECT_TRUE(throws_with([&] { Hdf5Reader r(dir / "text.h5"); }, {"text.h5", "not an HDF5 file"}));
  EXPECT_TRUE(
      throws_with([&] { Hdf5Reader r(dir / "missing.h5"); }, {"missing.h5", "no such file"}));
  EXPECT_TRUE(
      throws_with([&] { Hdf5Writer w(dir / "no/such/dir/x.h5"); }, {"x.h5.tmp", "cannot create"}));

  // A real HDF5 file cut short is reported, not crashed on.
  std::vector<float> big(4096, 1.0f);
  {
    Hdf5Writer out(dir / "cut.h5");
    out.write_f32("w", {4096}, big.data());
    out.commit();
  }
  std::filesystem::resize_file(dir / "cut.h5", 1000);
  EXPECT_TRUE(throws_with(
      [&] {
        Hdf5Reader r(dir / "cut.h5");
        r.read_f32("w");
      },
      {"cut.h5"}));
}

// Other writers (h5py with numpy bytes, say) store fixed-length strings; those read back too.
TEST(Hdf5Store, ReadsFixedLengthStringAttributes) {
  TempDir dir;
  const std::string path = (dir / "fixed.h5").string();
  hid_t file = create_with_user_block(path);
  ASSERT_GE(file, 0);
  hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, 8);
  H5Tset_strpad(type, H5T_STR_NULLPAD);
  hid_t space = H5Screate(H5S_SCALAR);
  hid_t attr = H5Acreate2(file, "name", type, space, H5P_DEFAULT, H5P_DEFAULT);
  const char value[8] = {'a', 'd', 'a', 'm', 'w', 0, 0, 0};
  ASSERT_GE(H5Awrite(attr, type, value), 0);
  H5Aclose(attr);
  H5Sclose(space);
  H5Tclose(type);
  H5Fclose(file);
  seal_hdf5_file(path);
  EXPECT_EQ(Hdf5Reader(dir / "fixed.h5").attr("name"), "adamw");
  EXPECT_TRUE(Hdf5Reader(dir / "fixed.h5").names().empty());
}

// A header may declare a dataset far larger than the file (space is allocated late and never
// written): the reader refuses it before allocating, naming the file, dataset and sizes.
TEST(Hdf5Store, DatasetLargerThanTheFileIsRefused) {
  TempDir dir;
  const std::string path = (dir / "huge.h5").string();
  hid_t file = create_with_user_block(path);
  ASSERT_GE(file, 0);
  const hsize_t dims[1] = {hsize_t(1) << 28};  // 1 GiB of f32
  hid_t space = H5Screate_simple(1, dims, nullptr);
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_LATE);
  hid_t ds = H5Dcreate2(file, "big", H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  ASSERT_GE(ds, 0);
  H5Dclose(ds);
  H5Pclose(dcpl);
  H5Sclose(space);
  H5Fclose(file);
  seal_hdf5_file(path);
  ASSERT_LT(std::filesystem::file_size(path), 100000u);
  Hdf5Reader r(dir / "huge.h5");
  EXPECT_EQ(r.shape("big"), std::vector<int64_t>{int64_t(1) << 28});
  EXPECT_TRUE(
      throws_with([&] { r.read_f32("big"); },
                  {"huge.h5", "dataset 'big'", "268435456 elements", "more than the file's"}));
}

// Found by fuzz_training_state: a corrupt global heap behind a variable-length string attribute
// made H5Aread loop forever. Such attributes are refused before reading; glm4 writes
// fixed-length ones (round trips are in RoundTripsDatasetsAndAttributes).
TEST(Hdf5Store, VariableLengthStringAttributesAreRefused) {
  TempDir dir;
  const std::string path = (dir / "vlen.h5").string();
  hid_t file = create_with_user_block(path);
  ASSERT_GE(file, 0);
  hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, H5T_VARIABLE);
  hid_t space = H5Screate(H5S_SCALAR);
  hid_t attr = H5Acreate2(file, "config", type, space, H5P_DEFAULT, H5P_DEFAULT);
  const char* value = "{}";
  ASSERT_GE(H5Awrite(attr, type, &value), 0);
  H5Aclose(attr);
  H5Sclose(space);
  H5Tclose(type);
  H5Fclose(file);
  seal_hdf5_file(path);
  EXPECT_TRUE(throws_with([&] { Hdf5Reader(dir / "vlen.h5").attr("config"); },
                          {"vlen.h5", "attribute 'config' is a variable-length string"}));
}

TEST(Hdf5Store, StringAttributesHaveANamedLimit) {
  TempDir dir;
  Hdf5Writer out(dir / "long.h5");
  out.set_attr("ok", std::string(kMaxHdf5StringAttrBytes - 1, 'a'));
  EXPECT_TRUE(throws_with([&] { out.set_attr("long", std::string(kMaxHdf5StringAttrBytes, 'a')); },
                          {"long.h5", "attribute 'long'", "kMaxHdf5StringAttrBytes = 60000"}));
  out.commit();
  EXPECT_EQ(Hdf5Reader(dir / "long.h5").attr("ok").size(), kMaxHdf5StringAttrBytes - 1);
}

TEST(Hdf5Store, WriterWithoutCommitLeavesNothing) {
  TempDir dir;
  float x = 2.0f;
  {
    Hdf5Writer out(dir / "abandoned.h5");
    out.write_f32("x", {1}, &x);
    EXPECT_EQ(dir.list(), std::vector<std::string>{"abandoned.h5.tmp"});
  }
  EXPECT_TRUE(dir.list().empty());
}

TEST(Hdf5Store, CommitReplacesAnOlderFile) {
  TempDir dir;
  float a = 1.0f, b = 2.0f;
  {
    Hdf5Writer out(dir / "r.h5");
    out.write_f32("x", {1}, &a);
    out.commit();
  }
  {
    Hdf5Writer out(dir / "r.h5");
    out.write_f32("x", {1}, &b);
    // Until commit, the old file is intact.
    EXPECT_EQ(Hdf5Reader(dir / "r.h5").read_f32("x"), std::vector<float>{a});
    out.commit();
  }
  EXPECT_EQ(Hdf5Reader(dir / "r.h5").read_f32("x"), std::vector<float>{b});
  EXPECT_EQ(dir.list(), std::vector<std::string>{"r.h5"});
}

}  // namespace
}  // namespace glm4
