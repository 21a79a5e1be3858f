// A request body of /v1/chat/completions (first byte even) or /v1/completions (odd) as
// parse_request checks it. ApiError is its way to refuse (a 400), like glm4::Error elsewhere.
#include "fuzz/fuzz_support.h"
#include "serve/openai_schema.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const auto endpoint =
      data[0] % 2 ? glm4::serve::Endpoint::Completion : glm4::serve::Endpoint::Chat;
  try {
    (void)glm4::serve::parse_request(glm4::fuzz::as_text(data + 1, size - 1), endpoint);
  } catch (const glm4::serve::ApiError& e) {
    (void)glm4::serve::error_body(e);
  } catch (const glm4::Error&) {
  }
  return 0;
}
