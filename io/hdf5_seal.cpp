#include "io/hdf5_seal.h"

#include <cstring>
#include <fstream>
#include <vector>

#include "base/check.h"

namespace glm4 {
namespace {

constexpr char kMagic[8] = {'G', 'L', 'M', '4', 'S', 'E', 'A', 'L'};

struct Seal {
  char magic[8];
  uint64_t payload_bytes;  // file size - kHdf5SealBytes
  uint64_t checksum;
};

// Four independent multiply-rotate lanes over 8-byte words (fast enough that a 100 GB
// checkpoint costs seconds, not minutes), then the tail and the length mixed in.
class Checksum {
 public:
  void add(const unsigned char* p, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      word_ |= uint64_t(p[i]) << (8 * filled_);
      if (++filled_ == 8) {
        uint64_t& lane = lanes_[lane_index_++ & 3];
        lane = rotl(lane + word_ * kPrime2, 31) * kPrime1;
        word_ = 0;
        filled_ = 0;
      }
    }
    length_ += n;
  }
  uint64_t finish() const {
    uint64_t h =
        rotl(lanes_[0], 1) + rotl(lanes_[1], 7) + rotl(lanes_[2], 12) + rotl(lanes_[3], 18);
    h ^= (word_ + filled_) * kPrime1;
    h ^= length_ * kPrime2;
    h ^= h >> 33;
    h *= kPrime2;
    h ^= h >> 29;
    return h;
  }

 private:
  static constexpr uint64_t kPrime1 = 0x9E3779B185EBCA87ull, kPrime2 = 0xC2B2AE3D27D4EB4Full;
  static uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
  uint64_t lanes_[4] = {kPrime1, kPrime2, kPrime1 ^ kPrime2, ~kPrime1};
  uint64_t word_ = 0, length_ = 0;
  int filled_ = 0;
  size_t lane_index_ = 0;
};

}  // namespace

uint64_t hdf5_payload_checksum(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  GLM4_CHECK(in, "HDF5 ", file, ": cannot open");
  in.seekg(std::streamoff(kHdf5SealBytes));
  Checksum sum;
  std::vector<char> buf(size_t(1) << 20);
  while (in) {
    in.read(buf.data(), std::streamsize(buf.size()));
    sum.add(reinterpret_cast<const unsigned char*>(buf.data()), size_t(in.gcount()));
  }
  GLM4_CHECK(!in.bad(), "HDF5 ", file, ": read error");
  return sum.finish();
}

void seal_hdf5_file(const std::filesystem::path& file) {
  const uint64_t size = std::filesystem::file_size(file);
  GLM4_CHECK(size >= kHdf5SealBytes, "HDF5 ", file, ": shorter than its user block");
  Seal seal;
  std::memcpy(seal.magic, kMagic, 8);
  seal.payload_bytes = size - kHdf5SealBytes;
  seal.checksum = hdf5_payload_checksum(file);
  std::fstream out(file, std::ios::binary | std::ios::in | std::ios::out);
  out.write(reinterpret_cast<const char*>(&seal), sizeof seal);
  out.flush();
  GLM4_CHECK(out, "HDF5 ", file, ": cannot write the checksum block");
}

void check_hdf5_seal(const std::filesystem::path& file) {
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(file, ec);
  GLM4_CHECK(!ec, "HDF5 ", file, ": cannot read its size: ", ec.message());
  Seal seal{};
  std::ifstream in(file, std::ios::binary);
  in.read(reinterpret_cast<char*>(&seal), sizeof seal);
  GLM4_CHECK(in && size >= kHdf5SealBytes && std::memcmp(seal.magic, kMagic, 8) == 0, "HDF5 ", file,
             ": not an HDF5 file written by glm4 (no checksum block; glm4 reads only its own)");
  GLM4_CHECK(seal.payload_bytes == size - kHdf5SealBytes, "HDF5 ", file, ": is ", size,
             " bytes but was written with ", seal.payload_bytes + kHdf5SealBytes,
             ": truncated or extended");
  GLM4_CHECK(hdf5_payload_checksum(file) == seal.checksum, "HDF5 ", file,
             ": checksum mismatch: the file is corrupt");
}

}  // namespace glm4
