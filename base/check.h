// Errors: always-on checks at API and file boundaries throw glm4::Error with a message that
// names the op, file, key or flag at fault. GLM4_DCHECK is for kernel internals (debug only).
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace glm4 {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

template <typename... Args>
std::string str_cat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}

template <typename... Args>
[[noreturn]] void fail(Args&&... args) {
  throw Error(str_cat(std::forward<Args>(args)...));
}

}  // namespace glm4

#define GLM4_CHECK(cond, ...)               \
  do {                                      \
    if (!(cond)) ::glm4::fail(__VA_ARGS__); \
  } while (0)

#ifdef NDEBUG
#define GLM4_DCHECK(cond) ((void)0)
#else
#include <cassert>
#define GLM4_DCHECK(cond) assert(cond)
#endif
