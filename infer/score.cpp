#include "infer/score.h"

#include <algorithm>
#include <cmath>

#include "autograd/node.h"
#include "autograd/ops.h"
#include "base/check.h"
#include "base/strings.h"
#include "infer/generator.h"

namespace glm4 {

namespace {
// The final-norm hidden states of every batch position, [B*T, hidden].
Tensor batch_hidden(const Glm4Model& model, const Batch& batch, const BatchLossOptions& options) {
  ForwardContext ctx;
  ctx.batch = batch.B;
  ctx.seq = batch.T;
  ctx.positions = batch.positions;
  ctx.mask = attention_mask(batch);
  ctx.training = options.training;
  ctx.dropout_seed = options.dropout_seed;
  ctx.recompute_layers = options.recompute_layers;
  Tensor hidden = model.forward_hidden(batch.input_ids, ctx);
  return ops::reshape(hidden, {batch.B * batch.T, model.config.hidden_size});
}
}  // namespace

Tensor batch_loss(const Glm4Model& model, const Batch& batch, const BatchLossOptions& options) {
  Tensor hidden = batch_hidden(model, batch, options);
  const Param& head = model.lm_head_weight();
  return ops::linear_cross_entropy(hidden, head.frozen, head.value, batch.targets,
                                   options.divide_by, model.compute);
}

std::vector<double> row_log_probs(const Glm4Model& model, const Batch& batch) {
  NoGradGuard no_grad;
  const Tensor hidden = batch_hidden(model, batch, {});
  const int64_t H = model.config.hidden_size;
  const Param& head = model.lm_head_weight();
  std::vector<double> out(size_t(batch.B), 0.0);
  for (int64_t b = 0; b < batch.B; ++b) {
    std::vector<int64_t> at;  // positions of row b that predict a target
    std::vector<int32_t> targets;
    for (int64_t t = 0; t < batch.T; ++t)
      if (int32_t y = batch.targets[size_t(b * batch.T + t)]; y != kIgnoreLabel) {
        at.push_back(b * batch.T + t);
        targets.push_back(y);
      }
    if (at.empty()) continue;
    Tensor rows = Tensor::empty({int64_t(at.size()), H});  // only the rows the loss reads
    for (size_t i = 0; i < at.size(); ++i)
      std::copy_n(hidden.data() + at[i] * H, H, rows.data() + int64_t(i) * H);
    out[size_t(b)] = -double(
        ops::linear_cross_entropy(rows, head.frozen, head.value, targets, 1.0, model.compute)
            .item());
  }
  return out;
}

std::vector<BatchScore> score_batches(const Glm4Model& model, const std::vector<Example>& examples,
                                      int64_t batch_size, int64_t max_batches, int64_t offset,
                                      int64_t stride) {
  GLM4_CHECK(batch_size > 0, "[score_loss] batch_size must be > 0, got ", batch_size);
  GLM4_CHECK(stride > 0 && offset >= 0 && offset < stride, "[score_loss] batches ", offset, " mod ",
             stride);
  for (size_t e = 0; e < examples.size(); ++e) {
    GLM4_CHECK(!examples[e].ids.empty(), "[score_loss] example ", e, " is empty");
    GLM4_CHECK(examples[e].labels.size() == examples[e].ids.size(), "[score_loss] example ", e,
               " has ", examples[e].ids.size(), " ids but ", examples[e].labels.size(), " labels");
  }
  NoGradGuard no_grad;
  const int32_t pad_id = model.config.pad_token_id.value_or(0);
  const int64_t n = int64_t(examples.size());
  int64_t batches = (n + batch_size - 1) / batch_size;
  if (max_batches > 0) batches = std::min(batches, max_batches);
  std::vector<BatchScore> out;
  for (int64_t k = offset; k < batches; k += stride) {
    Batch b = make_batch(examples, k * batch_size, std::min(n, (k + 1) * batch_size), pad_id);
    if (b.target_tokens == 0) continue;
    out.push_back({k, double(batch_loss(model, b, {.divide_by = 1.0}).item()), b.target_tokens});
  }
  return out;
}

LossScore score_loss(const Glm4Model& model, const std::vector<Example>& examples,
                     int64_t batch_size, int64_t max_batches) {
  double total = 0;
  int64_t tokens = 0;
  for (const BatchScore& b : score_batches(model, examples, batch_size, max_batches)) {
    total += b.total;
    tokens += b.tokens;
  }
  LossScore s;
  s.tokens = tokens;
  s.loss = tokens ? total / double(tokens) : NAN;
  s.perplexity = std::exp(s.loss);
  return s;
}

ExactMatchScore score_exact_match(const Glm4Model& model, const Tokenizer& tokenizer,
                                  const std::vector<AnswerExample>& examples,
                                  const std::vector<int32_t>& stop_ids, int64_t batch_size) {
  GLM4_CHECK(batch_size > 0, "[score_exact_match] batch_size must be > 0, got ", batch_size);
  constexpr int64_t kExtraTokens = 8;  // room to run past a wrong answer's length and stop
  NoGradGuard no_grad;
  ExactMatchScore s;
  for (size_t at = 0; at < examples.size(); at += size_t(batch_size)) {
    const size_t end = std::min(examples.size(), at + size_t(batch_size));
    std::vector<std::vector<int32_t>> prompts;
    GenerationConfig g;
    g.stop_ids = stop_ids;
    g.max_tokens = 0;
    for (size_t i = at; i < end; ++i) {
      prompts.push_back(examples[i].prompt);
      int64_t budget =
          int64_t(tokenizer.encode(trim(examples[i].reference), false).size()) + kExtraTokens;
      g.max_tokens = std::max<int>(g.max_tokens, int(budget));
    }
    std::vector<std::vector<int32_t>> answers = generate_batch(model, prompts, g);
    for (size_t i = 0; i < answers.size(); ++i) {
      const AnswerExample& ex = examples[at + i];
      std::string answer = trim(tokenizer.decode(answers[i], true));
      const bool ok = answer == trim(ex.reference);
      s.correct += ok;
      ++s.total;
      if (!ex.task.empty()) {
        s.by_task[ex.task].first += ok;
        s.by_task[ex.task].second += 1;
      }
      s.answers.push_back(std::move(answer));
    }
  }
  return s;
}

std::map<std::string, double> ExactMatchScore::rate_by_task() const {
  std::map<std::string, double> rates;
  for (const auto& [task, n] : by_task) rates[task] = double(n.first) / double(n.second);
  return rates;
}

std::map<std::string, LossScore> score_loss_by_task(const Glm4Model& model,
                                                    const std::vector<Example>& examples,
                                                    const std::vector<std::string>& tasks,
                                                    int64_t batch_size) {
  GLM4_CHECK(tasks.size() == examples.size(), "[score_loss_by_task] ", tasks.size(), " tasks for ",
             examples.size(), " examples");
  std::map<std::string, std::vector<Example>> by_task;
  for (size_t i = 0; i < examples.size(); ++i)
    if (!tasks[i].empty()) by_task[tasks[i]].push_back(examples[i]);
  std::map<std::string, LossScore> scores;
  for (const auto& [task, task_examples] : by_task)
    scores[task] = score_loss(model, task_examples, batch_size);
  return scores;
}

}  // namespace glm4
