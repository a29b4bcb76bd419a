// Preference data for the three steps of RLHF: JSONL rows of prompt, chosen and rejected
// text (DeepSpeed-Chat's fields), tokenized, and the batches each step trains on.
//
// Note [Preference sequences]: the prompt (after the tokenizer's prefix(), e.g. Llama's <s>)
// and each answer are tokenized separately and joined, so that the answer's tokens (the
// loss mask) are known exactly; DeepSpeed-Chat tokenizes the joined text, which gives the
// same tokens when the answer starts a new pre-tokenizer chunk (a leading space, as its
// datasets' answers have). A step-1/2 sequence is prompt + answer + <|endoftext|>, cut to
// max_seq_len tokens (the cut falls in the answer, so it may lose its <|endoftext|>, as
// DeepSpeed-Chat's truncation does).
// Rows whose prompt has more than max_prompt_seq_len tokens are dropped, for every step
// (DeepSpeed-Chat drops them in step 3 and truncates the joined text in steps 1 and 2).
//
// Batches are padded with pad_id, <|endoftext|> by default (the tokenizer's one special
// token). SFT and reward batches are right-padded to their longest row, rounded up to a
// multiple of column_multiple (the ranks that split each sequence under sequence
// parallelism); step 3's prompts are left-padded (Note [Left-padded prompts]).
//
// Note [SFT loss mask]: inputs[b, t] = s[t], targets[b, t] = s[t + 1] where s[t + 1] is an
// answer token (or its <|endoftext|>), else -100 (ignored by cross_entropy). With
// include_prompt the prompt's tokens are targets too: DeepSpeed-Chat's step 1 (labels =
// input ids wherever the attention mask is 1) does that.
//
// Note [Left-padded prompts]: DeepSpeed-Chat's step 3 left-pads the prompts so that all end
// at the same column and generation appends one column for the whole batch. A model given
// such a batch puts row b's token j at position j - pad_b and keeps every query from
// attending to its row's pad keys; triad's models do both (Note [Left-padded batches] in
// nn/language_model.h):
//   1. GPT and Llama forward(indices, nn::LeftPadding) and forward_cached(indices, cache,
//      positions) take positions (B, T) i64 (the GPT gathers its position rows per token, the
//      Llama its rotary angles); nn::left_padding(pads, T) makes them;
//   2. ops::causal_attention(q, k, v, scale, key_start (B,) i64): query i of row b sees keys
//      key_start[b] <= j <= i + Tk - Tq; a pad query outputs 0 and passes no gradient; the
//      CPU and CUDA kernels skip the masked keys; KVCache keeps key_start;
//   3. engine::generate_batch (engine/generate.h, Note [Batched generation]) continues B
//      prompts at once, returning the left-padded rows, the sampled tokens' log-probs and
//      the answer mask, and on a training Engine at any ZeRO stage
//      (engine/hybrid_engine.h, Note [Hybrid engine]).
// The training forward on the left-padded prompt + answer rows recomputes the recorded
// log-probs (within 1e-5 in f32). Right-padded batches need none of this: causal attention
// never lets a real token see a later pad, and the loss masks skip the pads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/tokenizer.h"
#include "tensor/tensor.h"

namespace triad::rlhf {

struct PreferenceRow {
  std::string prompt, chosen, rejected;
};

// The step a dataset is read for, and the fields it needs: sft "prompt" and "chosen";
// reward all three; rl "prompt" (DeepSpeed-Chat steps 1, 2 and 3).
enum class RlhfStep { sft, reward, rl };

// One JSON object per line (blank lines skipped); fields the step does not need may be
// missing (left empty). Throws Error naming the file and line: for text that is not a JSON
// object, a needed field missing or a field that is not a string. Error when the file
// cannot be read or holds no row.
std::vector<PreferenceRow> read_preference_jsonl(const std::string& path, RlhfStep step);
// One object {"prompt", "chosen", "rejected"} per line, written atomically.
void write_preference_jsonl(const std::string& path, const std::vector<PreferenceRow>& rows);

struct PreferenceExample {
  std::vector<int32_t> prompt, chosen, rejected;  // tokens, no <|endoftext|>
};

struct SequenceLimits {
  int64_t max_prompt_seq_len = 256;
  int64_t max_seq_len = 512;  // prompt + answer + <|endoftext|>; > max_prompt_seq_len
  int64_t column_multiple = 1;  // SFT and reward batches' columns: a multiple of it (>= 1)
  void validate() const;        // Error naming the bad limit
};

// The rows in `rows` order, tokenized; those with too long a prompt dropped (Note
// [Preference sequences]). Throws Error naming `source` when every row is dropped.
std::vector<PreferenceExample> tokenize_preferences(const std::vector<PreferenceRow>& rows,
                                                    const io::Tokenizer& tokenizer, const SequenceLimits& limits,
                                                    const std::string& source);

// Batches of the examples `select` picks (indices into examples), all tensors i64 on the
// host. eot: the token closing each answer; pad_id: the padding.
struct SftBatch {
  Tensor inputs, targets;  // (B, L): Note [SFT loss mask]
};
SftBatch make_sft_batch(const std::vector<PreferenceExample>& examples, const std::vector<int64_t>& select,
                        const SequenceLimits& limits, int32_t eot, int32_t pad_id, bool include_prompt = false);

struct RewardBatch {
  Tensor chosen, rejected;  // (B, L) prompt + answer + eot, right-padded to one length
  std::vector<int64_t> prompt_lengths;
  std::vector<int64_t> chosen_lengths, rejected_lengths;  // each row's tokens before its padding
};
RewardBatch make_reward_batch(const std::vector<PreferenceExample>& examples, const std::vector<int64_t>& select,
                              const SequenceLimits& limits, int32_t eot, int32_t pad_id);

// The next-token mask (B, L - 1) f32 of right-padded rows of L columns (rlhf/log_probs.h):
// 1 at t where token t + 1 is an answer token (prompt_lengths[b] <= t + 1 < lengths[b]), the
// answer's <|endoftext|> included: what DPO sums a sequence's log-probs over.
Tensor answer_mask(const std::vector<int64_t>& prompt_lengths, const std::vector<int64_t>& lengths, int64_t columns);

struct GenerationBatch {
  Tensor prompts;             // (B, P) left-padded to the longest prompt
  Tensor attention_mask;      // (B, P) 1 on prompt tokens, 0 on pads
  Tensor positions;           // (B, P) j - pad_b on prompt tokens, 0 on pads
  std::vector<int64_t> pads;  // pad_b, the left padding of each row
};
GenerationBatch make_generation_batch(const std::vector<PreferenceExample>& examples,
                                      const std::vector<int64_t>& select, int32_t pad_id);

}  // namespace triad::rlhf
