// A JSON-lines training file (text, prompt/completion, messages, token-id records; BOM, CRLF,
// blank lines) as for_each_record reads it.
#include "dataset/records.h"
#include "fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto file = glm4::fuzz::scratch_dir() / "train.jsonl";
  glm4::fuzz::write_bytes(file, data, size);
  return glm4::fuzz::accept_rejection([&] {
    int64_t seen = 0;
    const int64_t n = glm4::for_each_record(file.string(), [&](const glm4::Record& r, int64_t) {
      ++seen;
      if (r.has_labels && r.labels.size() != r.input_ids.size())
        std::abort();  // records.h promises one label per id
    });
    if (n != seen) std::abort();
  });
}
