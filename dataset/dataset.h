// Data sets for training: records tokenised into examples (ids + aligned labels), truncated to
// max_seq_length. Tokenisation goes through TextEncoder so this layer needs no tokenizer.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "autograd/ops.h"
#include "dataset/records.h"
#include "dataset/text_encoder.h"

namespace glm4 {

// labels[t] is the target AT position t (Hugging Face alignment): the loss lets position t-1
// predict labels[t], so labels[0] is never a target. kIgnoreLabel marks non-targets.
struct Example {
  std::vector<int32_t> ids;
  std::vector<int32_t> labels;  // [ids.size()]
};

struct DatasetOptions {
  bool mask_prompt = false;       // train on completions / assistant turns only
  int64_t max_seq_length = 2048;  // longer examples keep their first max_seq_length tokens
  int64_t vocab_size = 0;         // > 0: every id must be below it
};

// Tokenisation rules (P = prefix_ids, E = eos_id):
//   text:               P + encode(text) + E; targets: everything after P.
//   prompt/completion:  P + encode(prompt) + encode(completion) + E; targets: completion + E
//                       with mask_prompt, else everything after P.
//   messages:           render_chat(messages, tools) (no E added: the template ends turns
//                       itself); targets: the rendered target mask with mask_prompt, else
//                       everything after a leading P; tool result turns never.
//   input_ids:          as given; labels as given, or = input_ids. mask_prompt does not apply.
// Not truncated. Throws glm4::Error without a location (load_dataset adds file:line).
Example make_example(const Record& record, const TextEncoder& encoder,
                     const DatasetOptions& options);

// Targets the loss sees in one example: positions t >= 1 whose label is not kIgnoreLabel.
int64_t count_targets(const Example& example);

struct Dataset {
  std::string path;
  std::vector<Example> examples;
  int64_t truncated = 0;        // examples cut to max_seq_length (the caller warns)
  int64_t without_targets = 0;  // examples left with no target at all (after truncation)
  int64_t target_tokens = 0;    // sum of count_targets over examples
};

// Reads and tokenises one JSONL file. Errors name file:line; a file without records is an
// error naming the file.
Dataset load_dataset(const std::string& file, const TextEncoder& encoder,
                     const DatasetOptions& options);

}  // namespace glm4
