// Test helpers: a fresh temporary directory per test, and a check that a call throws
// glm4::Error whose message contains given parts.
#pragma once
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace glm4::testing {

// A directory unique to the running test, removed when the object dies.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }
  // Files in the directory (names only, sorted).
  std::vector<std::string> list() const;

 private:
  std::filesystem::path path_;
};

// Asserts that fn throws glm4::Error and that its message contains every one of `parts`.
// With GLM4_PRINT_ERRORS set in the environment the messages are printed, for reading.
::testing::AssertionResult throws_with(const std::function<void()>& fn,
                                       const std::vector<std::string>& parts);

}  // namespace glm4::testing
