// Test helpers for calls that should throw glm4::Error: check its message, or return it.
#pragma once
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "base/check.h"

namespace glm4::testing {

// Fails the test unless fn throws glm4::Error whose message contains needle.
template <typename Fn>
void expect_error(Fn&& fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one containing: " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << "message: " << e.what() << "\nexpected to contain: " << needle;
  }
}

// The message of the glm4::Error that f throws; fails the test and returns "" if none is thrown.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no glm4::Error thrown";
  return "";
}

}  // namespace glm4::testing
