// Bucketed collectives: one logical reduction or gather issued as several collectives of
// at most `bucket` elements each (DeepSpeed's reduce_bucket_size and allgather_bucket_size),
// so that no single message, nor the staging it needs, exceeds the bucket.
//
// The flat buffers are laid out by shard: rank r owns [r S, (r+1) S) of a padded buffer of
// n S elements. An all-reduce splits into contiguous pieces in place. A reduce-scatter or
// all-gather splits each shard into pieces of b = bucket / n elements: piece c of the
// collective is element range [c b, c b + l) of every rank's shard, which are n separate
// ranges of the flat buffer, so each piece goes through a staging buffer of n l elements
// (copied in before a reduce-scatter, copied out when an all-gather completes). When the
// whole collective fits one bucket it is issued as is, without staging.
#pragma once

#include <cstdint>

#include "parallel/communicator.h"

namespace triad::zero {

// In place over `flat`, in pieces of at most `bucket` elements.
parallel::WorkPtr bucketed_all_reduce(parallel::Communicator& comm, const Tensor& flat, int64_t bucket);
// input: n S elements (shard layout); output: S elements, this rank's reduced shard.
parallel::WorkPtr bucketed_reduce_scatter(parallel::Communicator& comm, const Tensor& input, const Tensor& output,
                                          int64_t bucket);
// input: S elements, this rank's shard; output: n S elements. input must not alias output.
parallel::WorkPtr bucketed_all_gather(parallel::Communicator& comm, const Tensor& input, const Tensor& output,
                                      int64_t bucket);

}  // namespace triad::zero
