// A triad-train config resolved for the layout triad-estimate is asked about, not the one
// it was written for: a config written for 8 ranks of pp 2 must still price pp 4 × dp 2, so
// its parallel keys are replaced by the layout's and its batch keys re-derived for it.
//
// Each field left at 0 / -1 / "" takes the config's value (tp: model.tensor_parallel or
// tensor_parallel.autotp_size; pp, schedule, virtual_stages: the pipeline section; ZeRO
// stage: zero_optimization.stage). The micro batch B and micro-batches m:
//   B  the asked one, else train_micro_batch_size_per_gpu, else train_batch_size / (m·dp)
//      (m the asked one or gradient_accumulation_steps, else 1) when that divides
//   m  the asked one, else gradient_accumulation_steps, else train_batch_size / (B·dp) when
//      that divides, else 1
// and train_batch_size becomes B·m·dp. The result is parse_config's on pp·tp·dp ranks, so
// a layout the trainer would refuse (interleaving with m not a multiple of pp, more
// stages than layers, tp not dividing the heads) is refused here with the trainer's
// message, prefixed by the layout.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/config.h"

namespace triad::estimate {

struct LayoutRequest {
  int pp = 0, tp = 0;
  int64_t dp = 1;
  int zero_stage = -1;
  int micro_batches = 0;    // m
  int64_t micro_batch = 0;  // B
  std::string schedule;
  int virtual_stages = 0;
  // Without a micro batch anywhere (no flag, no batch key that gives one): an Error when
  // true, else B = 1 (the ZeRO-only table, which does not use it).
  bool need_micro_batch = true;
};

// Reads the config, applies the --set overrides, fills `request` as above, and parses it.
engine::TrainConfig resolve_layout(const std::string& path, const std::vector<std::string>& overrides,
                                   LayoutRequest& request);

// "pp 4 × dp 2 × tp 1" for messages and headers.
std::string layout_name(const LayoutRequest& request);

}  // namespace triad::estimate
