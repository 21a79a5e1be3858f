// A checksum over an HDF5 file, kept in the file's user block (the first kHdf5SealBytes, which
// HDF5 leaves to the application). libhdf5 is not safe on corrupt input (fuzz_training_state:
// an endless loop in the global heap, heap overflows in object-header decoding), so Hdf5Reader
// hands it only files whose checksum matches: a truncated, bit-flipped or foreign file is
// refused by glm4's own code, before libhdf5 parses a byte of it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>

namespace glm4 {

constexpr size_t kHdf5SealBytes = 512;  // the user block HDF5 files get from Hdf5Writer

// 64-bit checksum of bytes [kHdf5SealBytes, end) of an open file's contents.
uint64_t hdf5_payload_checksum(const std::filesystem::path& file);

// Writes the seal (magic, payload length, checksum) into the first bytes of `file`, which must
// have been created with a user block of kHdf5SealBytes. Throws naming the file.
void seal_hdf5_file(const std::filesystem::path& file);

// Throws glm4::Error naming the file unless its seal matches its contents.
void check_hdf5_seal(const std::filesystem::path& file);

}  // namespace glm4
