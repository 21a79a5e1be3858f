// Candidate answers laid out as examples, and their log-probabilities from batched forwards.
#include "infer/classify.h"

#include <algorithm>

#include "base/check.h"
#include "infer/score.h"

namespace glm4 {

std::optional<std::string> record_answer(const Record& r) {
  switch (r.kind) {
    case Record::Kind::kChat: {
      GLM4_CHECK(!r.messages.empty(), "the record has no messages");
      const std::string& role = r.messages.back().role;
      if (role == "user") return std::nullopt;
      GLM4_CHECK(
          role == "assistant", "the messages end with a \"", role,
          "\" turn; classify needs a final assistant turn (the answer) or user turn (no answer)");
      return r.messages.back().content;
    }
    case Record::Kind::kPromptCompletion:
      if (r.completion.empty()) return std::nullopt;
      return r.completion;
    default:
      fail("classify needs {\"messages\": [...]} or {\"prompt\", \"completion\"} records");
  }
}

namespace {
// Leaves only the last run of targets (the final answer and the token that ends it).
void keep_final_answer(Example& ex) {
  size_t end = ex.labels.size();
  while (end > 0 && ex.labels[end - 1] == kIgnoreLabel) --end;
  size_t begin = end;
  while (begin > 0 && ex.labels[begin - 1] != kIgnoreLabel) --begin;
  GLM4_CHECK(end > begin && begin > 0, "the answer produced no target tokens after the prompt");
  std::fill(ex.labels.begin(), ex.labels.begin() + std::ptrdiff_t(begin), kIgnoreLabel);
}
}  // namespace

std::vector<Example> candidate_examples(const Record& record,
                                        const std::vector<std::string>& labels,
                                        const TextEncoder& encoder) {
  const bool has_answer = record_answer(record).has_value();
  DatasetOptions options;
  options.mask_prompt = true;
  std::vector<Example> out;
  for (const std::string& label : labels) {
    Record r = record;
    if (r.kind == Record::Kind::kPromptCompletion)
      r.completion = label;
    else if (has_answer)
      r.messages.back().content = label;
    else
      r.messages.push_back({"assistant", label});
    Example ex = make_example(r, encoder, options);
    keep_final_answer(ex);
    out.push_back(std::move(ex));
  }
  return out;
}

std::vector<Classification> classify(const Glm4Model& model,
                                     const std::vector<std::vector<Example>>& candidates,
                                     int64_t batch_size) {
  GLM4_CHECK(batch_size > 0, "[classify] batch_size must be > 0, got ", batch_size);
  if (candidates.empty()) return {};
  const size_t K = candidates[0].size();
  GLM4_CHECK(K > 0, "[classify] no candidate labels");
  const int32_t pad_id = model.config.pad_token_id.value_or(0);
  std::vector<Classification> out;
  for (size_t first = 0; first < candidates.size(); first += size_t(batch_size)) {
    const size_t last = std::min(candidates.size(), first + size_t(batch_size));
    std::vector<Example> rows;  // record-major: record i's label k is row (i - first) * K + k
    for (size_t i = first; i < last; ++i) {
      GLM4_CHECK(candidates[i].size() == K, "[classify] record ", i, " has ", candidates[i].size(),
                 " candidates, record 0 has ", K);
      rows.insert(rows.end(), candidates[i].begin(), candidates[i].end());
    }
    std::vector<double> lp =
        row_log_probs(model, make_batch(rows, 0, int64_t(rows.size()), pad_id));
    for (size_t i = 0; i < last - first; ++i) {
      Classification c;
      c.log_probs.assign(lp.begin() + std::ptrdiff_t(i * K),
                         lp.begin() + std::ptrdiff_t((i + 1) * K));
      c.predicted = std::max_element(c.log_probs.begin(), c.log_probs.end()) - c.log_probs.begin();
      out.push_back(std::move(c));
    }
  }
  return out;
}

ClassifyReport summarize(const std::vector<Classification>& results,
                         const std::vector<RecordAnswer>& answers, size_t labels) {
  GLM4_CHECK(results.size() == answers.size(), "[classify] ", results.size(), " results for ",
             answers.size(), " records");
  ClassifyReport r;
  r.predicted.assign(labels, 0);
  for (const Classification& c : results) {
    GLM4_CHECK(c.log_probs.size() == labels && c.predicted >= 0 && size_t(c.predicted) < labels,
               "[classify] a result has ", c.log_probs.size(),
               " log-probabilities and predicted label ", c.predicted, "; expected ", labels,
               " labels");
    ++r.predicted[size_t(c.predicted)];
  }
  r.with_answers = !answers.empty() && answers[0].label >= 0;
  if (!r.with_answers) return r;
  int64_t correct = 0, tokens = 0;
  double nll = 0;
  std::map<std::string, std::pair<int64_t, int64_t>> by_task;  // task -> (correct, total)
  r.confusion.assign(labels, std::vector<int64_t>(labels, 0));
  for (size_t i = 0; i < answers.size(); ++i) {
    GLM4_CHECK(answers[i].label >= 0 && size_t(answers[i].label) < labels, "[classify] record ", i,
               " has answer ", answers[i].label, "; expected one of ", labels,
               " labels in every record");
    const size_t answer = size_t(answers[i].label), predicted = size_t(results[i].predicted);
    const bool ok = answer == predicted;
    correct += ok;
    if (!answers[i].task.empty()) {
      by_task[answers[i].task].first += ok;
      by_task[answers[i].task].second += 1;
    }
    ++r.confusion[answer][predicted];
    nll -= results[i].log_probs[answer];
    tokens += answers[i].tokens;
  }
  r.accuracy = double(correct) / double(answers.size());
  for (const auto& [task, n] : by_task)
    r.accuracy_by_task[task] = double(n.first) / double(n.second);
  r.answer_loss = nll / double(tokens);
  return r;
}

}  // namespace glm4
