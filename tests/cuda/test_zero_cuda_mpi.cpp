// ZeRO stages 0–3 on a GPU over the MPI communicator, whose collectives stage device
// tensors through pinned host memory (Note [Staged collectives]): ranks share one GPU when
// there are fewer GPUs than ranks on the node. On every rank, the data-parallel trajectory
// of the tiny GPT equals the single-process one computed on the same GPU, within 1e-5
// relative, with and without gradient accumulation and with small buckets
// (support/zero_trajectory.h, as tests/zero/test_zero_mpi.cpp on the host). With the
// optimizer's state and Adam on the host (offload_optimizer cpu, Note [Host optimizer step]),
// pinned and pageable, stages 1-3 follow the run in device memory: f32 within 1e-5 (the host's
// Adam is the device's arithmetic, compiled for another processor), bf16 within 2e-2 (a
// last-bit difference of a master weight may round its 16-bit copy the other way); so does
// stage 3 with the parameter shards in host memory (offload_param cpu), alone within 1e-6,
// and with both offloads within those bounds; and so does half the state on the host
// (offload_optimizer.ratio 0.5), each side's bytes where the split puts them.
#define BOOST_TEST_MODULE zero_cuda_mpi
#define BOOST_TEST_NO_MAIN  // main() is TRIAD_SHARED_GPU_MPI_TEST_MAIN's

#include "cuda/gpu_test_main.h"
#include "cuda/runtime.h"
#include "parallel/runtime.h"
#include "support/zero_trajectory.h"

TRIAD_SHARED_GPU_MPI_TEST_MAIN()

using namespace triad;
using namespace triad::test;

namespace {

// A GPU of its own per rank when there are enough, else cuda:0 for all.
Device gpu() {
  const int n = cuda::device_count();
  return Device::cuda(parallel::ranks_on_node() <= n ? parallel::rank_on_node() : 0);
}

}  // namespace

BOOST_AUTO_TEST_CASE(stages_reproduce_the_single_process_trajectory) {
  const parallel::CommunicatorPtr world = parallel::world();
  BOOST_TEST_REQUIRE(world->name() == "mpi");
  BOOST_TEST_REQUIRE(make_model(gpu())->parameters().front().device().str() == gpu().str());
  for (int64_t accumulation : {1, 2}) {
    const Trajectory ref = single_process(accumulation, gpu());
    for (int stage : {0, 1, 2, 3}) {
      BOOST_TEST_CONTEXT("stage " << stage << ", accumulation " << accumulation) {
        check_same(data_parallel(world, {.stage = stage, .accumulation = accumulation, .device = gpu()}), ref);
      }
      BOOST_TEST_CONTEXT("stage " << stage << " in buckets of 100 elements, accumulation " << accumulation) {
        check_same(data_parallel(world, {.stage = stage, .accumulation = accumulation, .bucket = 100, .device = gpu()}),
                   ref);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(offloading_to_host_memory_follows_the_run_in_device_memory) {
  const parallel::CommunicatorPtr world = parallel::world();
  for (int stage : {1, 2, 3})
    for (DType dtype : {DType::f32, DType::bf16})
      for (bool pinned : {true, false}) {
        BOOST_TEST_CONTEXT("stage " << stage << ", " << dtype_name(dtype) << (pinned ? ", pinned" : ", pageable")) {
          const DataParallelRun plain{.stage = stage, .accumulation = 2, .dtype = dtype, .device = gpu()};
          DataParallelRun offloaded = plain;
          offloaded.offload = {.device = zero::OffloadDevice::cpu, .pin_memory = pinned};
          check_same(data_parallel(world, offloaded), data_parallel(world, plain), dtype == DType::f32 ? 1e-5 : 2e-2);
        }
      }
}

// Partial offload (Note [Partial offload]): ratio 0.5 over sub-groups of 300 elements, pinned,
// at stages 1-3 (and at stage 3 beside the parameter shards in host memory) follows the run
// in device memory within the bounds above; the first sub-groups whose elements add up to at
// most half the rank's state keep their moments (and master weights) on the GPU
// (optim_bytes: 8 or 12 bytes an element), the others are in host memory with the host
// store's buffers (host_bytes: 16 or 18).
BOOST_AUTO_TEST_CASE(offloading_half_the_state_follows_the_run_in_device_memory) {
  const parallel::CommunicatorPtr world = parallel::world();
  constexpr int64_t sub_group = 300;
  for (int stage : {1, 2, 3})
    for (DType dtype : {DType::f32, DType::bf16})
      for (bool params_on_host : {false, true}) {
        if (params_on_host && stage != 3) continue;
        BOOST_TEST_CONTEXT("stage " << stage << ", " << dtype_name(dtype)
                                    << (params_on_host ? ", parameters on the host" : "")) {
          const DataParallelRun plain{.stage = stage, .accumulation = 2, .dtype = dtype, .device = gpu()};
          DataParallelRun offloaded = plain;
          offloaded.offload = {.device = zero::OffloadDevice::cpu, .pin_memory = true, .ratio = 0.5};
          offloaded.sub_group_size = sub_group;
          if (params_on_host) offloaded.offload_param = {.device = zero::OffloadDevice::cpu, .pin_memory = true};
          int64_t total = 0, device = 0;  // the rank's elements, and those the split keeps on the GPU
          zero::ResidentBytes memory;
          offloaded.around_step = [&](const zero::ZeroOptimizer& opt, bool after) {
            if (!after) return;
            memory = opt.memory();
            std::vector<int64_t> ends;
            total = 0;
            for (const auto& [padded, _] : opt.group_sizes())
              for (int64_t first = 0; first < padded / world->size(); first += sub_group)
                ends.push_back(total += std::min(sub_group, padded / world->size() - first));
            device = 0;
            for (int64_t end : ends)
              if (2 * end <= total) device = end;
          };
          check_same(data_parallel(world, offloaded), data_parallel(world, plain), dtype == DType::f32 ? 1e-5 : 2e-2);
          const bool f32 = dtype == DType::f32;
          BOOST_TEST(memory.optim_bytes == (f32 ? 8 : 12) * device);
          if (!params_on_host) BOOST_TEST(memory.host_bytes == (f32 ? 16 : 18) * (total - device));
        }
      }
}

// Stage 3's parameter shards in host memory (offload_param cpu, Note [Offloaded parameters]),
// pinned and pageable, alone (the update on the device: the same arithmetic, within 1e-6)
// and beside the optimizer's state on the host (DeepSpeed's "ZeRO-3 with both offloads":
// the tolerances above), against the run with everything in device memory. With both, the
// host's Adam updates the shards where they live (Note [Parameters updated in place]): no
// step brings a shard onto the device or writes one back.
BOOST_AUTO_TEST_CASE(offloading_parameters_to_host_memory_follows_the_run_in_device_memory) {
  const parallel::CommunicatorPtr world = parallel::world();
  for (DType dtype : {DType::f32, DType::bf16}) {
    const DataParallelRun plain{.stage = 3, .accumulation = 2, .dtype = dtype, .device = gpu()};
    const Trajectory ref = data_parallel(world, plain);
    for (bool both : {false, true})
      for (bool pinned : {true, false}) {
        BOOST_TEST_CONTEXT(dtype_name(dtype) << (pinned ? ", pinned" : ", pageable")
                                             << (both ? ", optimizer on the host too" : "")) {
          DataParallelRun offloaded = plain;
          offloaded.offload_param = {.device = zero::OffloadDevice::cpu, .pin_memory = pinned};
          if (both) offloaded.offload = {.device = zero::OffloadDevice::cpu, .pin_memory = pinned};
          int64_t moved = 0;  // shards come onto the device or written back within steps
          offloaded.around_step = [&](const zero::ZeroOptimizer& opt, bool after) {
            moved += (after ? 1 : -1) * (opt.param_swap()->arrivals() + opt.param_swap()->writes());
          };
          const double tolerance = !both ? 1e-6 : dtype == DType::f32 ? 1e-5 : 2e-2;
          check_same(data_parallel(world, offloaded), ref, tolerance);
          BOOST_TEST((moved == 0) == both);
        }
      }
  }
}
