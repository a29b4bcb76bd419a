#include "zero/zero_config.h"

#include "tensor/error.h"

namespace triad::zero {

void ZeroConfig::validate(int64_t data_parallel) const {
  TRIAD_CHECK(stage >= 0 && stage <= 3, "[config] zero_optimization.stage must be an integer in [0, 3], got " << stage);
  TRIAD_CHECK(reduce_bucket_size > 0 && allgather_bucket_size > 0,
              "[config] zero_optimization bucket sizes must be positive, got reduce_bucket_size "
                  << reduce_bucket_size << " and allgather_bucket_size " << allgather_bucket_size);
  TRIAD_CHECK(gradient_predivide_factor > 0,
              "[config] gradient_predivide_factor must be > 0, got " << gradient_predivide_factor);
  TRIAD_CHECK(dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16,
              "ZeRO stores parameters in f32, bf16 or f16, not " << dtype_name(dtype));
  TRIAD_CHECK(weight_quantization_block >= 1,
              "[config] zero_optimization.zeropp_quantization_block must be at least 1, got " << weight_quantization_block);
  TRIAD_CHECK(gradient_quantization_block >= 2 && gradient_quantization_block % 2 == 0,
              "[config] zero_optimization.zeropp_gradient_quantization_block must be an even number of elements "
              "(int4 packs two per byte), got "
                  << gradient_quantization_block);
  validate_offload();
  validate_delayed_update();
  if (!quantized_weights && !quantized_gradients && hpz_partition_size == 1) return;
  TRIAD_CHECK(stage == 3, "[config] zero_optimization: ZeRO++ (zero_quantized_weights, zero_hpz_partition_size, "
                          "zero_quantized_gradients) runs at stage 3, not stage "
                              << stage);
  TRIAD_CHECK(hpz_partition_size >= 1 && data_parallel % hpz_partition_size == 0,
              "[config] zero_optimization.zero_hpz_partition_size " << hpz_partition_size << " must divide the "
                                                                    << data_parallel << " data-parallel ranks");
}

void ZeroConfig::validate_offload() const {
  const OffloadConfig& o = offload_optimizer;
  TRIAD_CHECK(o.device == OffloadDevice::none || stage >= 1,
              "[config] zero_optimization.offload_optimizer: offloading the optimizer's state runs at stages 1-3, not "
              "stage 0");
  TRIAD_CHECK(o.device != OffloadDevice::nvme || !o.nvme_path.empty(),
              "[config] zero_optimization.offload_optimizer.nvme_path is required with device \"nvme\" (the folder "
              "that holds each rank's optimizer state files)");
  TRIAD_CHECK(o.ratio >= 0.0 && o.ratio <= 1.0,
              "[config] zero_optimization.offload_optimizer.ratio must be a number in [0, 1], got " << o.ratio);
  TRIAD_CHECK(o.device != OffloadDevice::nvme || o.ratio == 1.0,
              "[config] zero_optimization.offload_optimizer.ratio below 1 (partial offload) runs with device \"cpu\", "
              "not \"nvme\" (every sub-group's state is in the files), got "
                  << o.ratio);
  TRIAD_CHECK(o.buffer_count >= 1,
              "[config] zero_optimization.offload_optimizer.buffer_count must be at least 1, got " << o.buffer_count);
  TRIAD_CHECK(sub_group_size >= 1, "[config] zero_optimization.sub_group_size must be at least 1, got " << sub_group_size);
  const ParamOffloadConfig& p = offload_param;
  TRIAD_CHECK(p.device == OffloadDevice::none || stage == 3,
              "[config] zero_optimization.offload_param: offloading parameters runs at stage 3, not stage " << stage);
  TRIAD_CHECK(p.device != OffloadDevice::nvme || !p.nvme_path.empty(),
              "[config] zero_optimization.offload_param.nvme_path is required with device \"nvme\" (the folder that "
              "holds each rank's parameter swap file)");
  TRIAD_CHECK(p.buffer_count >= 1,
              "[config] zero_optimization.offload_param.buffer_count must be at least 1, got " << p.buffer_count);
  TRIAD_CHECK(p.buffer_size >= 1,
              "[config] zero_optimization.offload_param.buffer_size must be at least 1, got " << p.buffer_size);
  io::check_aio(aio);
}

void ZeroConfig::validate_delayed_update() const {
  const DelayedUpdate& d = delayed_update;
  TRIAD_CHECK(d.warmup_steps >= 0,
              "[config] zero_optimization.delayed_update.warmup_steps must be at least 0, got " << d.warmup_steps);
  if (!d.enabled) return;
  TRIAD_CHECK(offload_param.device != OffloadDevice::nvme,
              "[config] zero_optimization.delayed_update does not run with offload_param.device \"nvme\" (the pending "
              "update would hold every parameter shard in memory); turn one of them off");
  TRIAD_CHECK(!defer_reduction,
              "[config] zero_optimization.delayed_update does not run in pipeline stages "
              "(pipeline.stages > 1)");
}

}  // namespace triad::zero
