// Classification by fixed answers: the log-probability of each candidate label as a record's
// answer, every candidate of a batch of records scored in one forward pass (no decoding).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dataset/dataset.h"
#include "model/glm4_model.h"

namespace glm4 {

// The answer a record holds: the content of its final assistant turn, or its completion.
// nullopt for messages that end with a user turn or an empty completion (nothing to compare
// with). Throws for other record shapes (text, token ids) and other final roles.
std::optional<std::string> record_answer(const Record& record);

// `record` once per label, the label written as its answer (replacing the final assistant turn
// or the completion, or appended as an assistant turn after a final user turn), tokenised by
// make_example with the prompt masked. Only the answer is a target: the label's tokens as the
// template writes them and the token that ends the answer, so a label that is the start of
// another does not score as high as it. Earlier assistant turns (few-shot examples) are prompt.
std::vector<Example> candidate_examples(const Record& record, const std::vector<std::string>& labels,
                                        const TextEncoder& encoder);

struct Classification {
  std::vector<double> log_probs;  // [labels]: log p(label is the answer | prompt), nats
  int64_t predicted = 0;          // index of the largest (the first of equal ones)
};

// Scores each record's candidates (one example per label, as candidate_examples makes them,
// every record the same count): `batch_size` records, so batch_size * labels rows, in one
// right-padded forward without a tape (make_batch, row_log_probs).
std::vector<Classification> classify(const Glm4Model& model, const std::vector<std::vector<Example>>& candidates,
                                     int64_t batch_size);

}  // namespace glm4
