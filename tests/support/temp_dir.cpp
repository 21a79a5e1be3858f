// Test helpers: per-test temporary directories and error-message checks.
#include "tests/support/temp_dir.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "base/check.h"

namespace glm4::testing {

TempDir::TempDir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = info ? std::string(info->test_suite_name()) + "." + info->name() : "none";
  std::replace(name.begin(), name.end(), '/', '_');
  path_ = std::filesystem::temp_directory_path() /
          ("glm4_test_" + std::to_string(::getpid()) + "_" + name);
  std::filesystem::remove_all(path_);
  std::filesystem::create_directories(path_);
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::vector<std::string> TempDir::list() const {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(path_))
    out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

::testing::AssertionResult throws_with(const std::function<void()>& fn,
                                       const std::vector<std::string>& parts) {
  try {
    fn();
  } catch (const Error& e) {
    std::string msg = e.what();
    for (const auto& p : parts)
      if (msg.find(p) == std::string::npos)
        return ::testing::AssertionFailure() << "message lacks \"" << p << "\": " << msg;
    if (std::getenv("GLM4_PRINT_ERRORS")) fprintf(stderr, "  error: %s\n", msg.c_str());
    return ::testing::AssertionSuccess() << msg;
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw a non-glm4 exception: " << e.what();
  }
  return ::testing::AssertionFailure() << "did not throw";
}

}  // namespace glm4::testing
