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
  if (!quantized_weights && !quantized_gradients && hpz_partition_size == 1) return;
  TRIAD_CHECK(stage == 3, "[config] zero_optimization: ZeRO++ (zero_quantized_weights, zero_hpz_partition_size, "
                          "zero_quantized_gradients) runs at stage 3, not stage "
                              << stage);
  TRIAD_CHECK(hpz_partition_size >= 1 && data_parallel % hpz_partition_size == 0,
              "[config] zero_optimization.zero_hpz_partition_size " << hpz_partition_size << " must divide the "
                                                                    << data_parallel << " data-parallel ranks");
}

}  // namespace triad::zero
