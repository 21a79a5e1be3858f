// Test helper: paths in the source tree that the command-line tests run on. GLM4_SOURCE_DIR is a
// compile definition of the test binaries only (tests/CMakeLists.txt), not of the support library.
#pragma once
#include <string>

#ifndef GLM4_SOURCE_DIR
#error "repo_paths.h needs GLM4_SOURCE_DIR: include it from a tests/test_*.cpp only"
#endif

namespace glm4::testing {

inline const std::string kSource = GLM4_SOURCE_DIR;
inline const std::string kModel = GLM4_SOURCE_DIR "/models/glm4-tiny";  // the embedded tiny model
inline const std::string kFinetune = GLM4_SOURCE_DIR "/data/finetune";  // its fine-tuning set

}  // namespace glm4::testing
