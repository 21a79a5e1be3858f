// Scoring a model on data, the one path the trainer's validation, `glm4 perplexity`, `glm4
// evaluate` and `glm4 classify` share: the loss of a batch (and its log-probability per row), the
// token-weighted loss (and perplexity) of a data set or of each of its tasks, and the exact
// match of greedy answers.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "dataset/batch.h"
#include "io/tokenizer/tokenizer.h"
#include "model/glm4_model.h"

namespace glm4 {

struct BatchLossOptions {
  double divide_by = 0;           // > 0: the loss is the sum over targets divided by this
  bool recompute_layers = false;  // recompute each decoder layer in the backward pass
  bool training = false;          // LoRA dropout on
  uint64_t dropout_seed = 0;
};

// Next-token cross-entropy of `batch` (its shifted targets): the mean over its targets, or the
// sum divided by options.divide_by. Records the graph when grad mode is on.
Tensor batch_loss(const Glm4Model& model, const Batch& batch, const BatchLossOptions& options = {});

// The log-probability of each row's targets (the sum of log p(target) over them; 0 for a row
// without targets), [B], from one forward without a tape: what batch_loss adds up, kept per row.
std::vector<double> row_log_probs(const Glm4Model& model, const Batch& batch);

struct LossScore {
  double loss = 0;        // mean cross-entropy (nats) over the scored tokens; NaN when none
  double perplexity = 0;  // exp(loss)
  int64_t tokens = 0;     // scored tokens
};

// Token-weighted loss over `examples` (labels[t] predicted from position t-1; kIgnoreLabel not
// scored), `batch_size` examples a forward in order, right-padded, without a tape; only the
// first `max_batches` batches when > 0. Throws naming the example for an empty one or labels
// that do not match its ids.
LossScore score_loss(const Glm4Model& model, const std::vector<Example>& examples,
                     int64_t batch_size, int64_t max_batches = 0);

// One batch of score_loss's walk: its index, loss summed over its targets, and target count.
struct BatchScore {
  int64_t index = 0;
  double total = 0;
  int64_t tokens = 0;
};

// The batches of score_loss's walk with index % stride == offset (all of them by default), so
// data-parallel ranks can split an evaluation and add the totals in batch order afterwards.
std::vector<BatchScore> score_batches(const Glm4Model& model, const std::vector<Example>& examples,
                                      int64_t batch_size, int64_t max_batches = 0,
                                      int64_t offset = 0, int64_t stride = 1);

// A prompt and the answer the model should give to it.
struct AnswerExample {
  std::vector<int32_t> prompt;  // ends where the answer starts (e.g. with <|assistant|>)
  std::string reference;        // compared after trimming whitespace
  std::string task;             // optional: scores are also kept per task
};

struct ExactMatchScore {
  int64_t correct = 0, total = 0;
  std::map<std::string, std::pair<int64_t, int64_t>> by_task;  // task -> (correct, total)
  std::vector<std::string> answers;                            // trimmed, one per example
  double rate() const { return total ? double(correct) / double(total) : 0.0; }
  std::map<std::string, double> rate_by_task() const;  // task -> correct / total
};

// Greedy answers (generated `batch_size` prompts at a time, stopping at a stop id or after the
// reference's token count + 8 tokens), decoded without special tokens, trimmed, compared with
// each reference exactly.
ExactMatchScore score_exact_match(const Glm4Model& model, const Tokenizer& tokenizer,
                                  const std::vector<AnswerExample>& examples,
                                  const std::vector<int32_t>& stop_ids, int64_t batch_size);

// score_loss over the examples of each task, by task: tasks[i] names examples[i]'s ("" for
// none: not scored).
std::map<std::string, LossScore> score_loss_by_task(const Glm4Model& model,
                                                    const std::vector<Example>& examples,
                                                    const std::vector<std::string>& tasks,
                                                    int64_t batch_size);

}  // namespace glm4
