// Tests of how weight files are held in memory (io/file_memory, base/memory): read into 2 MB
// pages or mapped, the same bytes and the same model either way, and the load report.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/node.h"
#include "base/memory.h"
#include "io/file_memory.h"
#include "io/file_read.h"
#include "io/model_files.h"
#include "model/glm4_model.h"
#include "model/save.h"
#include "tests/support/expect_error.h"
#include "tests/support/repo_paths.h"
#include "tests/support/temp_dir.h"

namespace glm4 {
namespace {

using testing::kModel;
using testing::TempDir;

std::vector<unsigned char> write_random_file(const std::filesystem::path& path, size_t n) {
  std::vector<unsigned char> bytes(n);
  std::mt19937 rng(7);
  for (auto& b : bytes) b = static_cast<unsigned char>(rng());
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), n);
  return bytes;
}

// The number after `field` (e.g. "Rss:") in the /proc/self/smaps entry of the mapping that holds
// `p`; -1 if not found.
int64_t smaps_value(const void* p, const std::string& field) {
  std::ifstream smaps("/proc/self/smaps");
  const uintptr_t addr = reinterpret_cast<uintptr_t>(p);
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    uintptr_t lo, hi;
    char dash;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-') {
      inside = lo <= addr && addr < hi;
      continue;
    }
    if (inside && line.rfind(field, 0) == 0) return std::stoll(line.substr(field.size()));
  }
  return -1;
}

int thp_eligible(const void* p) { return int(smaps_value(p, "THPeligible:")); }

TEST(FileMemory, HugePagesHoldTheFileBytesIn2MbAlignedAdvisedMemory) {
  TempDir dir;
  const size_t n = 5 * kHugePageBytes + 12345;  // several read chunks and a ragged tail
  const std::vector<unsigned char> want = write_random_file(dir / "w.bin", n);
  FileBytes f = FileBytes::open(dir / "w.bin", FileResidency::kHugePages, "test");
  EXPECT_EQ(f.residency(), FileResidency::kHugePages);
  ASSERT_EQ(f.size(), n);
  EXPECT_EQ(std::memcmp(f.data(), want.data(), n), 0);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(f.data()) % kHugePageBytes, 0u);
  // The kernel lists the mapping as eligible for huge pages exactly when THP is not off.
  const std::string mode = transparent_huge_page_mode();
  ASSERT_FALSE(mode.empty()) << "no /sys/kernel/mm/transparent_hugepage/enabled";
  EXPECT_EQ(thp_eligible(f.data()), mode == "never" ? 0 : 1) << "THP mode " << mode;
}

// Whether `path`'s filesystem opens files for direct I/O (tmpfs and some others refuse O_DIRECT).
bool opens_direct(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECT);
  if (fd < 0) return false;
  ::close(fd);
  return true;
}

TEST(FileMemory, HugePagesAreReadPastThePageCacheWhereTheFilesystemAllows) {
  TempDir dir;
  // A ragged tail (direct reads take whole blocks) and a file of whole blocks.
  for (const size_t n : {3 * kHugePageBytes + 777, 2 * kHugePageBytes + 8192}) {
    const std::vector<unsigned char> want = write_random_file(dir / "w.bin", n);
    FileBytes f = FileBytes::open(dir / "w.bin", FileResidency::kHugePages, "test");
    ASSERT_EQ(f.size(), n);
    EXPECT_EQ(std::memcmp(f.data(), want.data(), n), 0) << n << " bytes";
    EXPECT_EQ(f.direct_bytes(), opens_direct(dir / "w.bin") ? n : 0) << n << " bytes";
    FileBytes mapped = FileBytes::open(dir / "w.bin", FileResidency::kMapped, "test");
    EXPECT_EQ(mapped.direct_bytes(), 0u);
  }
}

TEST(FileMemory, DirectReadsFallBackToThePageCacheWhenRefused) {
  TempDir dir;
  const size_t n = 3 * kDirectAlign + 100;  // a ragged end
  const std::vector<unsigned char> want = write_random_file(dir / "w.bin", n);
  const OwnedFd fd(::open((dir / "w.bin").c_str(), O_RDONLY));
  ASSERT_GE(fd.fd, 0);
  const bool direct_here = opens_direct(dir / "w.bin");
  const OwnedFd direct(::open((dir / "w.bin").c_str(), O_RDONLY | O_DIRECT));
  const OwnedFd a_directory(::open(dir.path().c_str(), O_RDONLY));
  ASSERT_GE(a_directory.fd, 0);
  // Room to the next block, aligned, and one byte off alignment (O_DIRECT refuses that).
  std::vector<unsigned char> buffer(n + 2 * kDirectAlign);
  unsigned char* aligned = reinterpret_cast<unsigned char*>(
      (reinterpret_cast<uintptr_t>(buffer.data()) + kDirectAlign - 1) / kDirectAlign *
      kDirectAlign);
  struct Way {
    const char* what;
    int direct;
    unsigned char* dst;
    size_t direct_bytes;
  };
  for (const Way& w : {Way{"no direct descriptor", -1, aligned, 0},
                       Way{"direct", direct.fd, aligned, direct_here ? n : 0},
                       Way{"a misaligned destination", direct.fd, aligned + 1, 0},
                       Way{"a descriptor that cannot read", a_directory.fd, aligned, 0}}) {
    std::memset(aligned, 0, n + 1);
    EXPECT_EQ(read_range_direct(w.direct, fd.fd, w.dst, 0, n, "test"), w.direct_bytes) << w.what;
    EXPECT_EQ(std::memcmp(w.dst, want.data(), n), 0) << w.what;
  }
  // A range from the middle: whole blocks in, whole blocks out.
  EXPECT_EQ(read_range_direct(direct.fd, fd.fd, aligned, kDirectAlign, kDirectAlign, "test"),
            direct_here ? kDirectAlign : 0);
  EXPECT_EQ(std::memcmp(aligned, want.data() + kDirectAlign, kDirectAlign), 0);
  // When the page cache cannot read either, the error names the file and the byte.
  testing::expect_error(
      [&] { read_range_direct(-1, a_directory.fd, aligned, 0, n, "safetensors w.bin"); },
      "safetensors w.bin: read failed at byte 0");
  testing::expect_error(
      [&] { read_range(fd.fd, aligned, n - 10, 20, "w.bin"); },
      "w.bin: read failed at byte " + std::to_string(n) + ": the file shrank while being read");
}

// A direct read that comes back short in the middle of a range (the direct descriptor is a copy of
// the file cut there): the rest comes through the page cache, byte for byte, whether the cut is
// on a block boundary (the next direct read returns nothing) or inside a block (a partial block
// ends the direct reads at once).
TEST(FileMemory, DirectReadsShortInTheMiddleContinueThroughThePageCache) {
  TempDir dir;
  const size_t n = 6 * kDirectAlign + 300;
  const std::vector<unsigned char> want = write_random_file(dir / "w.bin", n);
  const OwnedFd fd(::open((dir / "w.bin").c_str(), O_RDONLY));
  ASSERT_GE(fd.fd, 0);
  const bool direct_here = opens_direct(dir / "w.bin");
  std::vector<unsigned char> buffer(n + 2 * kDirectAlign);
  unsigned char* aligned = reinterpret_cast<unsigned char*>(
      (reinterpret_cast<uintptr_t>(buffer.data()) + kDirectAlign - 1) / kDirectAlign *
      kDirectAlign);
  for (const size_t cut : {2 * kDirectAlign, 3 * kDirectAlign + 1000}) {
    std::ofstream(dir / "cut.bin", std::ios::binary)
        .write(reinterpret_cast<const char*>(want.data()), std::streamsize(cut));
    const OwnedFd short_direct(::open((dir / "cut.bin").c_str(), O_RDONLY | O_DIRECT));
    std::memset(aligned, 0, n);
    EXPECT_EQ(read_range_direct(short_direct.fd, fd.fd, aligned, 0, n, "test"),
              direct_here ? cut : 0)
        << "cut at " << cut;
    EXPECT_EQ(std::memcmp(aligned, want.data(), n), 0) << "cut at " << cut;
  }
}

// The resident bytes of the mapping that holds `p` (its smaps "Rss:", in kB there).
int64_t mapping_rss(const void* p) { return smaps_value(p, "Rss:") * 1024; }

TEST(FileMemory, DiscardGivesBackTheWholePagesInsideARange) {
  TempDir dir;
  const size_t n = 3 * kHugePageBytes;
  const std::vector<unsigned char> want = write_random_file(dir / "w.bin", n);
  FileBytes f = FileBytes::open(dir / "w.bin", FileResidency::kHugePages, "test");
  const size_t begin = 1000, end = begin + kHugePageBytes + 5000;  // pages 1 .. 512 inside
  const int64_t rss_before = mapping_rss(f.data());
  ASSERT_GE(rss_before, int64_t(n));
  EXPECT_EQ(f.discard(f.data() + begin, end - begin), size_t(512 * 4096));
  EXPECT_LE(mapping_rss(f.data()), rss_before - 512 * 4096);
  EXPECT_EQ(std::memcmp(f.data(), want.data(), 4096), 0);  // the partial pages keep their bytes
  EXPECT_EQ(std::memcmp(f.data() + 513 * 4096, want.data() + 513 * 4096, n - 513 * 4096), 0);
  EXPECT_EQ(f.data()[4096], 0);  // the discarded pages read as zeros
  EXPECT_EQ(f.data()[513 * 4096 - 1], 0);
  EXPECT_EQ(f.discard(f.data() + 10, 4000), 0u);  // no whole page inside
  testing::expect_error([&] { f.discard(f.data() + n - 10, 20); }, "outside the file");

  FileBytes mapped = FileBytes::open(dir / "w.bin", FileResidency::kMapped, "test");
  EXPECT_EQ(mapped.discard(mapped.data() + begin, end - begin), size_t(512 * 4096));
  EXPECT_EQ(std::memcmp(mapped.data(), want.data(), n), 0);  // read again from the file
}

TEST(FileMemory, MappedAndSmallFilesAreMapsOfTheFile) {
  TempDir dir;
  const std::vector<unsigned char> big = write_random_file(dir / "big.bin", 3 * kHugePageBytes);
  const std::vector<unsigned char> small = write_random_file(dir / "small.bin", 1000);
  FileBytes mapped = FileBytes::open(dir / "big.bin", FileResidency::kMapped, "test");
  EXPECT_EQ(mapped.residency(), FileResidency::kMapped);
  EXPECT_EQ(std::memcmp(mapped.data(), big.data(), big.size()), 0);
  FileBytes tiny = FileBytes::open(dir / "small.bin", FileResidency::kHugePages, "test");
  EXPECT_EQ(tiny.residency(), FileResidency::kMapped);  // under one huge page
  EXPECT_EQ(std::memcmp(tiny.data(), small.data(), small.size()), 0);
}

TEST(FileMemory, AutoReadsWhatFitsTheAvailableMemoryAndMapsTheRest) {
  const int64_t available = available_memory_bytes();
  ASSERT_GT(available, 0) << "no MemAvailable in /proc/meminfo";
  EXPECT_EQ(resolve_residency(FileResidency::kAuto, 100 << 20), FileResidency::kHugePages);
  EXPECT_EQ(resolve_residency(FileResidency::kAuto, size_t(available)), FileResidency::kMapped);
  EXPECT_EQ(resolve_residency(FileResidency::kMapped, 1), FileResidency::kMapped);
  EXPECT_EQ(resolve_residency(FileResidency::kHugePages, size_t(available) * 4),
            FileResidency::kHugePages);
}

TEST(FileMemory, ErrorsNameTheFile) {
  TempDir dir;
  testing::expect_error(
      [&] { FileBytes::open(dir / "absent.bin", FileResidency::kHugePages, "x"); },
      "absent.bin\": cannot open");
  testing::expect_error([&] { FileBytes::open(dir.path(), FileResidency::kHugePages, "x"); },
                        "not a regular file");
}

std::vector<float> logits_of(const Glm4Model& m) {
  NoGradGuard no_grad;
  std::vector<int32_t> ids{1, 5, 9, 200, 31, 7, 64, 2};
  ForwardContext ctx;
  ctx.seq = int64_t(ids.size());
  for (int32_t t = 0; t < int32_t(ids.size()); ++t) ctx.positions.push_back(t);
  Tensor logits = m.logits(m.forward_hidden(ids, ctx), ctx);
  return {logits.data(), logits.data() + logits.numel()};
}

TEST(FileMemory, AModelReadIntoHugePagesIsTheMappedModel) {
  auto mapped = load_model(kModel, FileResidency::kMapped);
  auto read = load_model(kModel, FileResidency::kHugePages);
  EXPECT_EQ(mapped->loaded.residency, FileResidency::kMapped);
  EXPECT_EQ(read->loaded.residency, FileResidency::kHugePages);
  const size_t bytes = std::filesystem::file_size(kModel + "/model.safetensors");
  EXPECT_EQ(read->loaded.file_bytes, bytes);
  EXPECT_EQ(mapped->loaded.file_bytes, bytes);
  EXPECT_GE(read->loaded.seconds, 0.0);
  EXPECT_EQ(logits_of(*mapped), logits_of(*read));
  EXPECT_NE(read->loaded.describe().find("read into 2 MB pages"), std::string::npos)
      << read->loaded.describe();
  const bool direct = opens_direct(kModel + "/model.safetensors");
  EXPECT_EQ(read->loaded.direct_bytes, direct ? bytes : 0);
  EXPECT_EQ(mapped->loaded.direct_bytes, 0u);
  EXPECT_EQ(read->loaded.describe().find("(direct I/O, ") != std::string::npos, direct)
      << read->loaded.describe();
  EXPECT_EQ(read->loaded.fields().at("direct_bytes"), read->loaded.direct_bytes);
  EXPECT_NE(mapped->loaded.describe().find("mapped (mmap)"), std::string::npos)
      << mapped->loaded.describe();
}

TEST(FileMemory, ShardsAreReadTogetherAndGiveTheSameModel) {
  TempDir dir;
  auto model = load_model(kModel, FileResidency::kMapped);
  save_model(*model, dir.path(), DType::BF16, 4 << 20);  // 10 MB in shards of at most 4 MB
  ModelFiles files = ModelFiles::open(dir.path(), FileResidency::kHugePages);
  ASSERT_GE(files.files().size(), 3u);
  EXPECT_EQ(files.residency(), FileResidency::kHugePages);
  for (const auto& f : files.files())
    EXPECT_EQ(f->residency(), f->file_bytes() >= kHugePageBytes ? FileResidency::kHugePages
                                                                : FileResidency::kMapped)
        << f->path();
  auto sharded = load_model(dir.path(), FileResidency::kHugePages);
  EXPECT_EQ(logits_of(*sharded), logits_of(*model));
}

}  // namespace
}  // namespace glm4
