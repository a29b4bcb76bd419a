// Splitting one dataset between the three steps of RLHF training (SFT, reward model, RL)
// so that no step trains on another's rows.
//
// Note [Data split]: DeepSpeed-Chat's get_raw_dataset_split_index, for a dataset of n rows
// and data_split "w_0,w_1,...,w_k-1" (e.g. "2,4,4"):
//   f_i = w_i / sum(w)
//   b_0 = 0, b_i+1 = b_i + round(f_i n)   (round half to even, as Python's round)
//   d = b_k - n; b_i -= d for every i >= 1 (the rounding error is taken from split 0's end
//   and passed down, so that b_k = n)
//   split i = perm[b_i, b_i+1) for one permutation perm of [0, n) drawn from the seed.
// DeepSpeed-Chat draws perm with numpy's RandomState(seed).shuffle; triad draws it with its
// own counter-based generator (seeded_permutation), so the split sizes agree with
// DeepSpeed-Chat's and the rows in them do not. Each step of a run uses the same seed, so
// the splits are disjoint and together cover the dataset.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace triad::rlhf {

// The weights of "2,4,4": non-negative numbers, comma-separated, with a positive sum.
// Throws Error quoting the string otherwise.
std::vector<double> parse_data_split(const std::string& data_split);

// b_0..b_k of Note [Data split] for n rows.
std::vector<int64_t> split_bounds(int64_t n, const std::vector<double>& weights);

// A permutation of [0, n), a pure function of (n, seed): Fisher-Yates over random_bits.
std::vector<int64_t> seeded_permutation(int64_t n, uint64_t seed);

// The rows of split `index` (0 SFT, 1 reward model, 2 RL for three weights). Throws Error
// when index is not a split of data_split.
std::vector<int64_t> data_split_indices(int64_t n, const std::string& data_split, int index, uint64_t seed);

}  // namespace triad::rlhf
