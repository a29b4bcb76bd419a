// NCCL's names for triad's dtypes and reductions, as the NCCL communicator
// (nccl_communicator.cu) passes them. Needs nccl.h: included only by the files built with
// NCCL.
#pragma once

#include <nccl.h>

#include "parallel/communicator.h"
#include "tensor/dtype.h"

namespace triad::cuda {

ncclDataType_t nccl_type(DType t);  // bf16 and f16 as NCCL's own (sums in fp32 per step)
ncclRedOp_t nccl_op(parallel::ReduceOp op);

}  // namespace triad::cuda
