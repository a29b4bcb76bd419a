// Where a reward model's score of a sequence is read: one position, the same in its training
// (step 2) and wherever its scores are used (PPO's and GRPO's samples, chosen_reward).
//
// Note [Score position]: every answer ends with <|endoftext|>, and a sequence's score is the
// reward model's value at that token, as in DeepSpeed-Chat. There the end-of-conversation
// token is appended to every chosen and rejected text (data_utils.py) and the score is read
// at c_ind - 1, c_ind the first pad after the answer, in training (RewardModel.forward) and in
// scoring (forward_value) alike: since its pad differs from the end token, c_ind - 1 is that
// token. triad's answers get the same token: step 2's sequences are prompt + answer +
// <|endoftext|> (appended to every chosen and rejected answer: the tokenizer never makes it
// from text; Note [Preference sequences]) and generation stops on it. triad's batches pad
// with <|endoftext|> itself, so a row's end is found from its length, never from its ids:
//   training       reward_batch_loss: reward_loss with each row's padding marked by an id
//                  no token has, so that c_ind - 1 is the row's last token, its <|endoftext|>;
//   samples        sample_scores: the value at column P + n_b - 1 of a generated row, n_b its
//                  generated tokens, the stop token included: a sample that stopped is scored
//                  at the <|endoftext|> it generated, whatever padding follows;
//   chosen_reward  chosen_scores: the reward batch's chosen rows, read as in training;
//   the critic     PPO's critic starts as the reward model (critic.init), values and all.
// A sequence without its <|endoftext|> is scored at its last token, as DeepSpeed-Chat does
// (no pad after the answer: c_ind is the sequence's length, in training and scoring): a pair
// cut to max_seq_len in training, and a sample that reached max_answer_seq_len without
// stopping (no penalty is added for it, as none is in DeepSpeed-Chat).
#pragma once

#include <vector>

#include "nn/value_model.h"
#include "rlhf/preference_data.h"
#include "rlhf/reward_loss.h"

namespace triad::rlhf {

// A pair batch's loss and scores: its chosen and rejected rows run through `model` (the
// value model, or the Engine's module holding it) as one batch on `device`, then reward_loss
// with each row's padding found from its length (Note [Score position]).
RewardLoss reward_batch_loss(nn::Module& model, const RewardBatch& batch, Device device);
// The same from the values (2B, L) a model gave the batch's chosen, then rejected rows (on a
// pipeline's last stage: Note [RLHF pipeline stages] in rlhf/step_run.h).
RewardLoss reward_values_loss(const Tensor& values, const RewardBatch& batch);

// The scores of generated rows: values (R, P + N) from the reward model on the left-padded
// prompt + answer rows, answer_mask (R, N) as engine::BatchGeneration gives it, on the host
// (1 at each generated token, the stop token included, then 0). Row b's score is its value
// at column P + n_b - 1 (Error naming the row when it generated nothing). Scores (R,) in the
// values' dtype, picked out where the values are: nothing is read from their device.
Tensor sample_scores(const Tensor& values, const Tensor& answer_mask);

// The reward model's scores (R,) of the dataset's own chosen answers to `select`'s examples,
// read where training reads them (make_reward_batch's chosen rows, padded with eot), on
// `device`, which they are not read from.
Tensor chosen_scores(nn::ValueModel& reward, const std::vector<PreferenceExample>& data,
                     const std::vector<int64_t>& select, const SequenceLimits& limits, int32_t eot, Device device);

}  // namespace triad::rlhf
