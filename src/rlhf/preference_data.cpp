#include "rlhf/preference_data.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io/atomic_file.h"

namespace triad::rlhf {

namespace {

std::vector<const char*> needed_fields(RlhfStep step) {
  switch (step) {
    case RlhfStep::sft:
      return {"prompt", "chosen"};
    case RlhfStep::reward:
      return {"prompt", "chosen", "rejected"};
    case RlhfStep::rl:
      return {"prompt"};
  }
  return {};
}

// The string field `name` of `row` (empty when absent and not needed).
std::string field(const nlohmann::json& row, const char* name, bool needed, const std::string& where) {
  const auto it = row.find(name);
  if (it == row.end()) {
    TRIAD_CHECK(!needed, where << ": missing field \"" << name << "\"");
    return {};
  }
  TRIAD_CHECK(it->is_string(), where << ": field \"" << name << "\" is not a string");
  return it->get<std::string>();
}

const PreferenceExample& pick(const std::vector<PreferenceExample>& examples, int64_t i, const char* what) {
  TRIAD_CHECK(i >= 0 && i < int64_t(examples.size()),
              what << ": example " << i << " is outside the " << examples.size() << " examples");
  return examples[size_t(i)];
}

// prompt + answer + eot, cut to max_seq_len.
std::vector<int64_t> sequence(const std::vector<int32_t>& prompt, const std::vector<int32_t>& answer, int32_t eot,
                              int64_t max_seq_len) {
  std::vector<int64_t> s(prompt.begin(), prompt.end());
  s.insert(s.end(), answer.begin(), answer.end());
  s.push_back(eot);
  if (int64_t(s.size()) > max_seq_len) s.resize(size_t(max_seq_len));
  return s;
}

// The columns of a batch whose longest row has `length` tokens (SequenceLimits::column_multiple).
int64_t batch_columns(size_t length, const SequenceLimits& limits) {
  const int64_t m = limits.column_multiple;
  return (int64_t(length) + m - 1) / m * m;
}

Tensor padded(const std::vector<std::vector<int64_t>>& rows, int64_t length, int64_t pad) {
  std::vector<int64_t> flat;
  for (const auto& r : rows) {
    flat.insert(flat.end(), r.begin(), r.end());
    flat.insert(flat.end(), size_t(length) - r.size(), pad);
  }
  return Tensor::from_vector(flat, {int64_t(rows.size()), length});
}

}  // namespace

std::vector<PreferenceRow> read_preference_jsonl(const std::string& path, RlhfStep step) {
  std::ifstream in(path);
  TRIAD_CHECK(in, "cannot open preference data '" << path << "'");
  std::vector<PreferenceRow> rows;
  const std::vector<const char*> needed = needed_fields(step);
  auto is_needed = [&](const char* name) {
    return std::any_of(needed.begin(), needed.end(), [&](const char* n) { return std::string(n) == name; });
  };
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(number);
    nlohmann::json row;
    try {
      row = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      TRIAD_CHECK(false, where << ": not valid JSON (" << e.what() << ")");
    }
    TRIAD_CHECK(row.is_object(), where << ": expected a JSON object with \"prompt\", \"chosen\" and \"rejected\"");
    rows.push_back({field(row, "prompt", is_needed("prompt"), where), field(row, "chosen", is_needed("chosen"), where),
                    field(row, "rejected", is_needed("rejected"), where)});
  }
  TRIAD_CHECK(!in.bad(), "cannot read preference data '" << path << "'");
  TRIAD_CHECK(!rows.empty(), "preference data '" << path << "' holds no row");
  return rows;
}

void write_preference_jsonl(const std::string& path, const std::vector<PreferenceRow>& rows) {
  std::string text;
  for (const PreferenceRow& r : rows)
    text += nlohmann::json{{"prompt", r.prompt}, {"chosen", r.chosen}, {"rejected", r.rejected}}.dump() + "\n";
  io::write_file_atomically(path, {{text.data(), text.size()}}, "preference data");
}

void SequenceLimits::validate() const {
  TRIAD_CHECK(max_prompt_seq_len >= 1, "max_prompt_seq_len must be >= 1, got " << max_prompt_seq_len);
  TRIAD_CHECK(max_seq_len > max_prompt_seq_len,
              "max_seq_len (" << max_seq_len << ") must exceed max_prompt_seq_len (" << max_prompt_seq_len << ")");
  TRIAD_CHECK(column_multiple >= 1, "column_multiple must be >= 1, got " << column_multiple);
}

std::vector<PreferenceExample> tokenize_preferences(const std::vector<PreferenceRow>& rows,
                                                    const io::Tokenizer& tokenizer, const SequenceLimits& limits,
                                                    const std::string& source) {
  limits.validate();
  std::vector<PreferenceExample> out;
  for (const PreferenceRow& r : rows) {
    std::vector<int32_t> prompt = tokenizer.prefix();  // Llama's <s>, as tokenizer(prompt) gives it
    const std::vector<int32_t> text = tokenizer.encode(r.prompt);
    prompt.insert(prompt.end(), text.begin(), text.end());
    PreferenceExample e{std::move(prompt), tokenizer.encode(r.chosen), tokenizer.encode(r.rejected)};
    if (int64_t(e.prompt.size()) <= limits.max_prompt_seq_len) out.push_back(std::move(e));
  }
  TRIAD_CHECK(!out.empty(), source << ": all " << rows.size() << " prompts are longer than max_prompt_seq_len "
                                   << limits.max_prompt_seq_len << " tokens");
  return out;
}

SftBatch make_sft_batch(const std::vector<PreferenceExample>& examples, const std::vector<int64_t>& select,
                        const SequenceLimits& limits, int32_t eot, int32_t pad_id, bool include_prompt) {
  limits.validate();
  TRIAD_CHECK(!select.empty(), "make_sft_batch: no example selected");
  std::vector<std::vector<int64_t>> inputs, targets;
  size_t length = 0;
  for (const int64_t i : select) {
    const PreferenceExample& e = pick(examples, i, "make_sft_batch");
    const std::vector<int64_t> s = sequence(e.prompt, e.chosen, eot, limits.max_seq_len);
    const size_t first_target = include_prompt ? 1 : e.prompt.size();  // position in s of the first target
    inputs.emplace_back(s.begin(), s.end() - 1);
    std::vector<int64_t> t(s.begin() + 1, s.end());
    for (size_t k = 0; k + 1 < first_target && k < t.size(); ++k) t[k] = -100;
    targets.push_back(std::move(t));
    length = std::max(length, inputs.back().size());
  }
  const int64_t columns = batch_columns(length, limits);
  return {padded(inputs, columns, pad_id), padded(targets, columns, -100)};
}

RewardBatch make_reward_batch(const std::vector<PreferenceExample>& examples, const std::vector<int64_t>& select,
                              const SequenceLimits& limits, int32_t eot, int32_t pad_id) {
  limits.validate();
  TRIAD_CHECK(!select.empty(), "make_reward_batch: no example selected");
  std::vector<std::vector<int64_t>> chosen, rejected;
  RewardBatch batch;
  size_t length = 0;
  for (const int64_t i : select) {
    const PreferenceExample& e = pick(examples, i, "make_reward_batch");
    chosen.push_back(sequence(e.prompt, e.chosen, eot, limits.max_seq_len));
    rejected.push_back(sequence(e.prompt, e.rejected, eot, limits.max_seq_len));
    batch.prompt_lengths.push_back(int64_t(e.prompt.size()));
    batch.chosen_lengths.push_back(int64_t(chosen.back().size()));
    batch.rejected_lengths.push_back(int64_t(rejected.back().size()));
    length = std::max({length, chosen.back().size(), rejected.back().size()});
  }
  batch.chosen = padded(chosen, batch_columns(length, limits), pad_id);
  batch.rejected = padded(rejected, batch_columns(length, limits), pad_id);
  return batch;
}

Tensor answer_mask(const std::vector<int64_t>& prompt_lengths, const std::vector<int64_t>& lengths, int64_t columns) {
  TRIAD_CHECK(prompt_lengths.size() == lengths.size() && columns >= 2,
              "answer_mask: " << prompt_lengths.size() << " prompt lengths, " << lengths.size() << " lengths, "
                              << columns << " columns");
  const auto B = int64_t(lengths.size());
  std::vector<float> mask(size_t(B * (columns - 1)), 0.0f);
  for (int64_t b = 0; b < B; ++b) {
    TRIAD_CHECK(prompt_lengths[size_t(b)] >= 1 && lengths[size_t(b)] <= columns,
                "answer_mask: row " << b << " has a prompt of " << prompt_lengths[size_t(b)] << " and "
                                    << lengths[size_t(b)] << " tokens in " << columns << " columns");
    for (int64_t t = prompt_lengths[size_t(b)] - 1; t + 1 < lengths[size_t(b)]; ++t) mask[size_t(b * (columns - 1) + t)] = 1;
  }
  return Tensor::from_vector(mask, {B, columns - 1});
}

GenerationBatch make_generation_batch(const std::vector<PreferenceExample>& examples,
                                      const std::vector<int64_t>& select, int32_t pad_id) {
  TRIAD_CHECK(!select.empty(), "make_generation_batch: no example selected");
  size_t length = 0;
  for (const int64_t i : select) length = std::max(length, pick(examples, i, "make_generation_batch").prompt.size());
  TRIAD_CHECK(length > 0, "make_generation_batch: every selected prompt is empty");
  std::vector<int64_t> prompts, mask, positions;
  GenerationBatch batch;
  for (const int64_t i : select) {
    const std::vector<int32_t>& p = examples[size_t(i)].prompt;
    TRIAD_CHECK(!p.empty(), "make_generation_batch: example " << i << " has an empty prompt");
    const size_t pad = length - p.size();
    batch.pads.push_back(int64_t(pad));
    for (size_t j = 0; j < length; ++j) {
      const bool real = j >= pad;
      prompts.push_back(real ? p[j - pad] : pad_id);
      mask.push_back(real);
      positions.push_back(real ? int64_t(j - pad) : 0);
    }
  }
  const Shape shape = {int64_t(select.size()), int64_t(length)};
  batch.prompts = Tensor::from_vector(prompts, shape);
  batch.attention_mask = Tensor::from_vector(mask, shape);
  batch.positions = Tensor::from_vector(positions, shape);
  return batch;
}

}  // namespace triad::rlhf
