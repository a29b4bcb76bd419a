// Training checkpoints: one HDF5 file (io/h5file.h) per checkpoint, the same whatever
// process layout wrote it. Every tensor is stored once, by name, with its full logical
// (global) shape; each rank writes the element range its ZeRO shard covers of its
// tensor-parallel part of the parameter (io/placement.h: a slice of the dataset, padding
// left out; a replicated parameter is written by tp rank 0), and reads the ranges it keeps,
// so any grid (tp x dp ranks) at any ZeRO stage can resume any checkpoint.
//
//   /model/<parameter>                      the parameter, in the training dtype
//   /optim/<parameter>/master               f32 master weights (the parameter itself in f32)
//   /optim/<parameter>/exp_avg, exp_avg_sq  f32 Adam moments
//   /state/step                             optimizer steps done (schedule and data position)
//   /state/optimizer_steps                  steps AdamW's bias correction has counted
//   /state/loss_scale, loss_scale_hysteresis, loss_scale_clean_steps   (fp16's dynamic scale)
//   /state/rng, /state/rng_tp               (ranks, 2) i64: each writer rank's dropout
//                                           generators (seed, offset): the default one and
//                                           the tensor-parallel region's
//   attributes of "/": format_version, kind ("checkpoint" or "weights"), config (the
//   training config JSON), layout (JSON: dp, tp, pp, zero_stage, dtype of the writer)
//   attribute "checksum" of every dataset: io/checksum.h over its elements as stored
//
// A weights file (export, or the trained model a run leaves in output_dir) has /model only,
// in f32 or bf16, and the same attributes with kind "weights". A quantized model (kind
// "quantized", checkpoint/quantized_model.h) is read by load_model and the serial tools.
//
// With offload to NVMe (zero_optimization.offload_optimizer / offload_param device "nvme"),
// saving and loading stream (Note [Streamed checkpoints] in zero/zero_optimizer.h): each
// state goes between the swap files and the file a batch of flat groups at a time, and each
// rank syncs what it wrote and drops the file's pages from the page cache after every batch,
// so that a checkpoint of a model larger than memory is written and read through memory of
// about one group's state, in the same format (any layout resumes it).
//
// Saving writes `<path>.tmp`, flushes and syncs it, and renames it to `path`: a reader sees
// the previous file or the complete new one. Loading verifies the checksum of every dataset
// it restores (each rank checksums the elements its shard covers; the sums must match the
// attribute), so damage is an Error naming the file and dataset, never wrong weights.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "io/tensor_file.h"
#include "parallel/communicator.h"

namespace triad::engine {

constexpr int64_t kCheckpointFormatVersion = 1;

// Collective over `world`, every rank of the engine's grid (its dp x tp ranks). Throws Error
// naming the file on failure; `path` is then untouched.
void save_checkpoint(const std::string& path, Engine& engine, parallel::Communicator& world);
// Collective over `world`. Restores the engine's parameters, optimizer state and step, and
// this rank's dropout generators when the writer had the same grid (else they are reseeded
// from the config's seed, the ranks and the step, and a note says so on rank 0). Throws
// Error naming the file (and dataset) when it is missing, damaged, fails a checksum, or
// holds another model than the engine's config describes.
void load_checkpoint(const std::string& path, Engine& engine, parallel::Communicator& world);

// Collective over `world`: the trained model's weights alone (kind "weights") in dtype (f32
// or bf16), at their global shapes.
void save_weights(const std::string& path, Engine& engine, parallel::Communicator& world, DType dtype);
// Values of the engine's parameters kept sharded as the optimizer keeps its master weights
// (e.g. an average of the weights, rlhf/actor_ema.h), a batch at a time (Note [Streamed
// checkpoints]): batch k is this rank's share of the optimizer's k-th view batch
// (ZeroOptimizer::view_batches), shaped as its StateView::owned_slices; none past the rank's
// last batch.
using SliceBatch = std::function<std::vector<zero::ZeroOptimizer::Slice>(size_t k)>;
// Collective over `world`: those values as a weights file (kind "weights") in dtype (f32 or
// bf16). `owned(k)` is asked for each batch in order, and its result dropped before the next
// is asked for. With offload (where the optimizer's views read the state in: NVMe, or the
// parameters in host memory on a GPU) an Error `owned` throws on one rank is thrown on every
// rank, the file untouched.
void save_weight_batches(const std::string& path, Engine& engine, parallel::Communicator& world, DType dtype,
                         const SliceBatch& owned);
// Collective: the inverse. `owned(k)` gives the tensors that batch k's ranges of a weights
// file of the engine's model are read into (in f32, each range checksum-verified), and
// `stored(k)` is called once they hold it, before the next batch is asked for (an Error either
// throws on one rank is thrown on every rank, as for saving). Throws Error naming the file
// (and dataset) when it is missing, damaged or holds another model.
void load_weight_batches(const std::string& path, Engine& engine, parallel::Communicator& world,
                         const SliceBatch& owned, const std::function<void(size_t k)>& stored);

// Collective over `world`: throws Error on every rank when `error` (this rank's, "" for
// none) is set on any, with the lowest failing rank's message, which the other ranks follow
// with " (rank R)" naming it. How saving and loading make an error met on one rank (a
// damaged swap file) every rank's.
void throw_if_any(const std::string& error, parallel::Communicator& world);

// Serial: a checkpoint of a model trained elsewhere (checkpoint/hf_checkpoint.h), as a run of
// `config` would save it before its first step: `weights` (by parameter name, at their
// global shapes) as the parameters and f32 master weights, zero Adam moments, step 0, the
// loss scale a run of the default fp16 section starts with, and the dropout generators of
// one rank seeded from config's seed (layout: one rank, ZeRO stage 0, f32). It names no
// other layout, so any grid resumes it; the model's names and shapes are the caller's.
void save_initial_checkpoint(const std::string& path, const nlohmann::json& config, const io::NamedTensors& weights);

// Serial (one process, no MPI needed) views of a file, for tools.
struct CheckpointSummary {
  std::string kind;        // "checkpoint" or "weights"
  int64_t format_version;  // kCheckpointFormatVersion
  int64_t step;            // -1 for weights files
  nlohmann::json config, layout;
  nlohmann::json recipe;  // a quantized model's (checkpoint/quantized_model.h); null otherwise
  struct Dataset {
    std::string name;
    Shape shape;
    DType dtype;
    uint64_t stored_checksum;
  };
  std::vector<Dataset> datasets;
};
CheckpointSummary read_summary(const std::string& path);
// Recomputes every dataset's checksum; returns the names of those that do not match (empty:
// the file verifies). Throws Error when the file cannot be read at all.
std::vector<std::string> failed_checksums(const std::string& path);
// The model's weights in a checkpoint or weights file, in f32, by parameter name (the master
// weights when the file has them), once every dataset of the file verifies its checksum;
// with the config it was trained with. A quantized model (checkpoint/quantized_model.h) is
// an Error naming the file: its integers are not weights to export.
struct ModelWeights {
  io::NamedTensors weights;
  nlohmann::json config;
};
ModelWeights read_weights(const std::string& path);
// Writes the model's weights from a checkpoint or weights file to `out` (kind "weights") in
// dtype: f32 from the master weights when the file has them, bf16 rounded from those.
void export_weights(const std::string& path, const std::string& out, DType dtype);
// Weights only (fine-tuning from a trained model, with a fresh optimizer): each parameter
// of `module` whose name starts with `prefix` from the file's weights of <name without the
// prefix> (its f32 master weights where it has them, else /model), this rank's part of it when the module is built for
// tensor parallelism; the other parameters keep their values. Serial. Returns how many were
// loaded. Throws Error naming the file, the dataset and the models when a dataset is
// missing or of another shape (another model), or fails its checksum.
int64_t load_parameters(const std::string& path, nn::Module& module, const std::string& prefix = "");
// The model a checkpoint or weights file holds (its config's model.arch), in f32, with the
// config it was trained with. With a tensor-parallel `parallelism`, each rank of its group
// holds its part of every parameter (read from the global datasets); whatever grid wrote
// the file.
struct LoadedModel {
  std::shared_ptr<nn::LanguageModel> model;
  nlohmann::json config;
};
LoadedModel load_model(const std::string& path, std::shared_ptr<const nn::Parallelism> parallelism = nn::serial());

}  // namespace triad::engine
