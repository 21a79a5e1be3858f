// Classification by fixed answers: the log-probability of each candidate label as a record's
// answer, every candidate of a batch of records scored in one forward pass (no decoding).
#pragma once
#include <cstdint>
#include <map>
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
std::vector<Example> candidate_examples(const Record& record,
                                        const std::vector<std::string>& labels,
                                        const TextEncoder& encoder);

struct Classification {
  std::vector<double> log_probs;  // [labels]: log p(label is the answer | prompt), nats
  int64_t predicted = 0;          // index of the largest (the first of equal ones)
};

// Scores each record's candidates (one example per label, as candidate_examples makes them,
// every record the same count): `batch_size` records, so batch_size * labels rows, in one
// right-padded forward without a tape (make_batch, row_log_probs).
std::vector<Classification> classify(const Glm4Model& model,
                                     const std::vector<std::vector<Example>>& candidates,
                                     int64_t batch_size);

// What a record holds besides its candidates, for the summary: the index of its answer among
// the labels (-1 without one), its task ("" for none) and the target tokens of its answer's
// candidate (count_targets).
struct RecordAnswer {
  int64_t label = -1;
  std::string task;
  int64_t tokens = 0;
};

// What classify reports over a set of records: how often each label was chosen, and when the
// records hold answers, accuracy overall and per task, the answer loss and the confusion counts.
struct ClassifyReport {
  std::vector<int64_t> predicted;                  // [labels]: records given each label
  bool with_answers = false;                       // the fields below are set only then
  double accuracy = 0;                             // share of records predicted right
  std::map<std::string, double> accuracy_by_task;  // over the records that name a task
  double answer_loss = 0;                          // nats per answer token (evaluate's too)
  std::vector<std::vector<int64_t>> confusion;     // [answer][predicted] -> records
};

// Sums up `results` (one per record) against `answers` (one per record: every one with an
// answer, or none with one) over `labels` candidate labels.
ClassifyReport summarize(const std::vector<Classification>& results,
                         const std::vector<RecordAnswer>& answers, size_t labels);

}  // namespace glm4
