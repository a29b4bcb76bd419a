#include "zero/zero_config.h"

#include "tensor/error.h"

namespace triad::zero {

void ZeroConfig::validate() const {
  TRIAD_CHECK(stage >= 0 && stage <= 3, "[config] zero_optimization.stage must be an integer in [0, 3], got " << stage);
  TRIAD_CHECK(reduce_bucket_size > 0 && allgather_bucket_size > 0,
              "[config] zero_optimization bucket sizes must be positive, got reduce_bucket_size "
                  << reduce_bucket_size << " and allgather_bucket_size " << allgather_bucket_size);
  TRIAD_CHECK(gradient_predivide_factor > 0,
              "[config] gradient_predivide_factor must be > 0, got " << gradient_predivide_factor);
  TRIAD_CHECK(dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16,
              "ZeRO stores parameters in f32, bf16 or f16, not " << dtype_name(dtype));
}

}  // namespace triad::zero
