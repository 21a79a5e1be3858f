// Tokenising records into examples with aligned labels, and loading a JSONL file of them.
#include "dataset/dataset.h"

#include <algorithm>

#include "base/check.h"

namespace glm4 {

namespace {

void append(std::vector<int32_t>& ids, std::vector<int32_t>& labels,
            const std::vector<int32_t>& more, bool target) {
  for (int32_t id : more) {
    ids.push_back(id);
    labels.push_back(target ? id : kIgnoreLabel);
  }
}

std::vector<int32_t> encode(const TextEncoder& enc, const std::string& text) {
  GLM4_CHECK(bool(enc.encode), "text records need a tokenizer (TextEncoder::encode is not set)");
  return enc.encode(text);
}

void check_eos(const TextEncoder& enc) {
  GLM4_CHECK(enc.eos_id >= 0, "text records need an end-of-sequence token; the tokenizer has none");
}

bool valid_id(int32_t id, int64_t vocab_size) {
  return id >= 0 && (vocab_size <= 0 || id < vocab_size);
}

std::string vocab_text(int64_t vocab_size) {
  return vocab_size > 0 ? str_cat("outside the vocabulary (size ", vocab_size, ")")
                        : std::string("negative");
}

void check_ids(const Example& ex, int64_t vocab_size) {
  GLM4_CHECK(!ex.ids.empty(), "the record produced no tokens");
  for (size_t t = 0; t < ex.ids.size(); ++t) {
    GLM4_CHECK(valid_id(ex.ids[t], vocab_size), "token id ", ex.ids[t], " at position ", t, " is ",
               vocab_text(vocab_size));
    GLM4_CHECK(ex.labels[t] == kIgnoreLabel || valid_id(ex.labels[t], vocab_size), "label ",
               ex.labels[t], " at position ", t, " is ", vocab_text(vocab_size));
  }
}

}  // namespace

Example make_example(const Record& r, const TextEncoder& enc, const DatasetOptions& options) {
  Example ex;
  switch (r.kind) {
    case Record::Kind::kText: {
      check_eos(enc);
      append(ex.ids, ex.labels, enc.prefix_ids, false);
      append(ex.ids, ex.labels, encode(enc, r.text), true);
      append(ex.ids, ex.labels, {enc.eos_id}, true);
      break;
    }
    case Record::Kind::kPromptCompletion: {
      check_eos(enc);
      append(ex.ids, ex.labels, enc.prefix_ids, false);
      append(ex.ids, ex.labels, encode(enc, r.prompt), !options.mask_prompt);
      append(ex.ids, ex.labels, encode(enc, r.completion), true);
      append(ex.ids, ex.labels, {enc.eos_id}, true);
      break;
    }
    case Record::Kind::kChat: {
      GLM4_CHECK(bool(enc.render_chat),
                 "chat records need a chat template (TextEncoder::render_chat is not set)");
      ChatOptions chat_options;
      chat_options.tools = r.tools;
      RenderedChat chat = enc.render_chat(r.messages, chat_options);
      GLM4_CHECK(chat.target.size() == chat.ids.size(), "the chat template returned ",
                 chat.ids.size(), " ids but ", chat.target.size(), " target flags");
      GLM4_CHECK(chat.tool_result.empty() || chat.tool_result.size() == chat.ids.size(),
                 "the chat template returned ", chat.ids.size(), " ids but ",
                 chat.tool_result.size(), " tool-result flags");
      const std::vector<int32_t>& p = enc.prefix_ids;
      const bool has_prefix =
          chat.ids.size() >= p.size() && std::equal(p.begin(), p.end(), chat.ids.begin());
      const size_t first = has_prefix ? p.size() : 0;
      ex.ids = std::move(chat.ids);
      ex.labels.resize(ex.ids.size());
      for (size_t t = 0; t < ex.ids.size(); ++t) {
        // A tool's answer is never a target: the model does not write it.
        const bool tool = !chat.tool_result.empty() && chat.tool_result[t];
        const bool target = !tool && (options.mask_prompt ? chat.target[t] != 0 : t >= first);
        ex.labels[t] = target ? ex.ids[t] : kIgnoreLabel;
      }
      break;
    }
    case Record::Kind::kTokens:
      ex.ids = r.input_ids;
      ex.labels = r.has_labels ? r.labels : r.input_ids;
      break;
  }
  check_ids(ex, options.vocab_size);
  return ex;
}

int64_t count_targets(const Example& ex) {
  int64_t n = 0;
  for (size_t t = 1; t < ex.labels.size(); ++t) n += ex.labels[t] != kIgnoreLabel;
  return n;
}

Dataset load_dataset(const std::string& file, const TextEncoder& encoder,
                     const DatasetOptions& options) {
  GLM4_CHECK(options.max_seq_length > 0, "max_seq_length must be > 0, got ",
             options.max_seq_length);
  Dataset ds;
  ds.path = file;
  for_each_record(file, [&](const Record& r, int64_t) {
    Example ex = make_example(r, encoder, options);
    if (int64_t(ex.ids.size()) > options.max_seq_length) {
      ex.ids.resize(size_t(options.max_seq_length));
      ex.labels.resize(size_t(options.max_seq_length));
      ++ds.truncated;
    }
    const int64_t targets = count_targets(ex);
    ds.target_tokens += targets;
    ds.without_targets += targets == 0;
    ds.examples.push_back(std::move(ex));
  });
  GLM4_CHECK(!ds.examples.empty(), "data file '", file, "' holds no records");
  return ds;
}

}  // namespace glm4
