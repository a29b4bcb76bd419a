// A flat group: the parameters of one unit that share a weight decay, copied into one
// contiguous fp32 buffer padded to a multiple of the data-parallel size n, each parameter
// tensor repointed to be a view of it (Note [Flat parameters]). Rank r owns the element
// range [r S, (r+1) S) of the buffer, S = padded / n: its shard.
//
// Partitioned (ZeRO stage 3), a group keeps only its shard of the parameters; gather()
// rebuilds the full buffer from every rank's shard and points the parameters at it,
// release() drops it again and leaves the parameters pointing at no storage.
//
// Note [Flat parameters]: a parameter keeps its TensorImpl (modules, optimizers and saved
// backward inputs hold that handle) and only its storage and offset change, so every
// holder sees the flat buffer at once. The same holds for gradients: each parameter's
// .grad is set to a view of the group's flat gradient, so accumulation writes in place.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "parallel/communicator.h"
#include "tensor/tensor.h"

namespace triad::zero {

class FlatGroup {
 public:
  // params: f32, all on one device, where every buffer of the group lives. dtype: how
  // parameters and gradients are stored (f32, or bf16/f16 for mixed precision; the
  // parameters' TensorImpls take that dtype).
  FlatGroup(std::vector<std::pair<std::string, Tensor>> params, double weight_decay, int ranks, int rank,
            DType dtype = DType::f32);

  const std::vector<std::pair<std::string, Tensor>>& params() const { return params_; }
  double weight_decay() const { return weight_decay_; }
  int64_t numel() const { return numel_; }    // parameters, without padding
  int64_t padded() const { return padded_; }  // flat size, a multiple of ranks
  int64_t shard_size() const { return padded_ / ranks_; }
  // The flat size of `numel` elements over `ranks`: the next multiple of ranks.
  static int64_t padded_size(int64_t numel, int ranks) { return (numel + ranks - 1) / ranks * ranks; }

  const Tensor& flat() const { return flat_; }  // undefined while a partitioned group is released
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  // The parameters' values in f32 as they were before being stored in dtype (padded),
  // handed over once: the master weights of mixed precision start from them.
  Tensor take_initial_f32() { return std::move(initial_f32_); }
  Tensor shard(const Tensor& full) const;  // this rank's range of a padded-size tensor
  int64_t shard_begin() const { return int64_t(rank_) * shard_size(); }

  // The parameters' parts that flat range [begin, end) covers, in order: parameter index,
  // its first element and count, and where the part starts in the flat buffer.
  struct Piece {
    size_t param;
    int64_t first, count, flat_offset;
  };
  std::vector<Piece> pieces(int64_t begin, int64_t end) const;

  // The flat gradient, allocated (zeroed) on first use; params' .grad are views of it.
  const Tensor& grad();
  bool has_grad() const { return grad_.defined(); }
  // Drops the flat gradient and the params' .grad views (stage 2 after reduce-scatter).
  void release_grad();

  // Stage 3. partition(): keep this rank's shard (the master values from now on) and
  // release the full buffer. start_gather(): allocate the full buffer and all-gather the
  // shards into it (returns the operation); finish_gather(): point the parameters at it
  // once that operation has completed. release(): drop the full buffer.
  void partition();
  bool partitioned() const { return partitioned_; }
  const Tensor& owned_shard() const { return owned_shard_; }
  // Parameter offload (zero/param_swap.h) takes the shard out of memory (undefined) and puts
  // it back (a tensor of shard_size() elements in dtype on device); gathers need it in.
  void set_owned_shard(Tensor shard) { owned_shard_ = std::move(shard); }
  std::unique_ptr<parallel::Work> start_gather(parallel::Communicator& comm);
  // The same moving the shards as int8 blocks of `block` elements (ZeRO++ qwZ): each rank's
  // shard reaches every rank, itself included, as its dequantized values.
  std::unique_ptr<parallel::Work> start_quantized_gather(parallel::Communicator& comm, int64_t block);
  void finish_gather();
  void release();

  // ZeRO++ hpZ: keep_secondary() copies slice `rank` of `ranks` equal slices of the gathered
  // buffer (the secondary shard, over an hpZ group of `ranks`); start_secondary_gather()
  // rebuilds the full buffer from the group's secondary shards, as start_gather does from
  // the dp group's; drop_secondary() frees it.
  void keep_secondary(int rank, int ranks);
  bool has_secondary() const { return secondary_.defined(); }
  std::unique_ptr<parallel::Work> start_secondary_gather(parallel::Communicator& hpz);
  void drop_secondary() { secondary_ = Tensor(); }

 private:
  std::vector<std::pair<std::string, Tensor>> params_;
  std::vector<int64_t> offsets_;
  double weight_decay_;
  int ranks_, rank_;
  int64_t numel_ = 0, padded_ = 0;
  bool partitioned_ = false;
  DType dtype_;
  Device device_;
  Tensor flat_, grad_, owned_shard_, initial_f32_, secondary_;
};

}  // namespace triad::zero
