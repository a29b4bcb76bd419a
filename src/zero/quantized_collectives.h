// ZeRO++'s quantized collectives (Note [ZeRO++] in zero/zero_optimizer.h): qwZ's all-gather
// of int8 blocks and qgZ's two-hop reduce-scatter of int4 blocks, each one Work that
// finishes the dequantization when it completes.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "parallel/communicator.h"

namespace triad::zero {

// all_gather(input, output) moving each rank's input as int8 blocks of `block` elements
// and their f32 scales (ops::quantize_blocks): output chunk r holds rank r's input dequantized (every rank's
// output the same bits, its own chunk included). input: k elements; output: size() * k,
// both contiguous f32, bf16 or f16 of one dtype.
std::unique_ptr<parallel::Work> quantized_all_gather(parallel::Communicator& comm, const Tensor& input,
                                                     const Tensor& output, int64_t block);

// qgZ's reduce-scatter over a dp group whose ranks sit on nodes of intra->size() ranks
// each: node_order[a * L + l] is the dp rank at local position l of node a (intra's rank l,
// inter's rank a).
class HierarchicalReducer {
 public:
  HierarchicalReducer(parallel::CommunicatorPtr intra, parallel::CommunicatorPtr inter, std::vector<int> node_order,
                      int64_t block);
  // reduce_scatter(input, output) over the dp group. Hop one: an all-to-all over intra of
  // int4 blocks, each rank sending local rank l' the shards of the ranks at position l' on
  // every node; dequantized and summed in f32. Hop two: that partial sum, requantized, in
  // an all-to-all over inter; dequantized and summed in f32 into output, this rank's shard.
  // A hop over one rank moves and quantizes nothing. Hop two of this reducer's concurrent
  // calls is posted in the order of the calls on every rank (inter's collectives match in
  // order), whichever of their Works is tested or waited for first.
  // input: n * k elements (n = node_order.size()); output: k; contiguous, f32, bf16 or f16.
  std::unique_ptr<parallel::Work> reduce_scatter(const Tensor& input, const Tensor& output);

  struct Queue;  // calls whose hop two is not posted yet, in call order

 private:
  parallel::CommunicatorPtr intra_, inter_;
  std::vector<int> node_order_;
  int64_t block_;
  std::shared_ptr<Queue> queue_;
};

}  // namespace triad::zero
