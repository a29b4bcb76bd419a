// The figures of a model's Mixture-of-Experts layers for the metrics file: per MoE block,
// over the job's ranks and the step's micro-batches, what its router losses averaged and
// how its tokens were spread over its experts. Layout-free: each block is found by its
// name, blocks.{i}.moe, wherever a pipeline stage holds it.
#pragma once

#include <nlohmann/json.hpp>

#include "nn/module.h"
#include "nn/moe_config.h"
#include "parallel/communicator.h"

namespace triad::engine {

// Takes the totals of the MoE layers `model` holds (nn::MoE::take_totals) and, collective
// over `world` (every rank of the grid; null when run alone), returns
//   {"loss": sum over blocks of the mean aux_loss_coeff l_aux + z_loss_coeff z_loss,
//    "dropped_fraction": dropped choices / choices over every block,
//    "layers": [{"block": i, "l_aux", "z_loss", "dropped_fraction", "load": [share of the
//                choices each expert received]} ...]}
// or null when the model has no MoE block.
nlohmann::json moe_metrics(nn::Module& model, const nn::MoEModelConfig& moe, int64_t n_layer,
                           parallel::Communicator* world);

}  // namespace triad::engine
