// Data parallelism on GPUs through NCCL. With distributed_backend nccl the Engine runs ZeRO
// over an NCCL communicator on each rank's own GPU (NCCL puts no two ranks of one
// communicator on one GPU; with one rank it is a communicator of one), and on every rank
// the data-parallel trajectory of the tiny GPT equals the single-process one on the same
// GPU within 1e-5 relative, stages 0-3, with and without gradient accumulation
// (support/zero_trajectory.h, as test_zero_cuda_mpi.cpp over MPI). The losses are summed
// over MPI with host tensors, as the trainer does. auto picks NCCL for more than one rank.
#define BOOST_TEST_MODULE engine_nccl_cuda_mpi
#define BOOST_TEST_NO_MAIN  // main() is TRIAD_GPU_MPI_TEST_MAIN's

#include "cuda/gpu_test_main.h"
#include "engine/engine.h"
#include "parallel/runtime.h"
#include "support/zero_trajectory.h"

TRIAD_GPU_MPI_TEST_MAIN()

using namespace triad;
using namespace triad::test;

namespace {

// zero_trajectory.h's model, batches and AdamW as an Engine config over `ranks` ranks, on
// each rank's own GPU. Every stage-3 group is partitioned (persistence threshold 0), as in
// data_parallel().
engine::TrainConfig config(int stage, int64_t accumulation, const std::string& backend, int ranks) {
  const nlohmann::json adamw = {
      {"lr", kLr}, {"betas", {kAdam.beta1, kAdam.beta2}}, {"eps", kAdam.eps}, {"weight_decay", kDecay}};
  const nlohmann::json j = {
      {"model", {{"n_layer", 2}, {"n_head", 2}, {"d_model", 16}, {"seq_len", kSeq}, {"vocab_size", 32}}},
      {"train_batch_size", kGlobalBatch},
      {"gradient_accumulation_steps", accumulation},
      {"steps", kSteps},
      {"optimizer", {{"type", "AdamW"}, {"params", adamw}}},
      {"gradient_clipping", kClip},
      {"seed", 11},  // make_model's init_seed
      {"zero_optimization", {{"stage", stage}, {"stage3_param_persistence_threshold", 0}}},
      {"device", "cuda"},
      {"distributed_backend", backend}};
  return engine::parse_config(j, ranks);
}

// Rows [first, first + rows) of a global batch as (inputs, targets) on the host.
std::pair<Tensor, Tensor> batch_rows(const Tensor& tokens, int64_t first, int64_t rows) {
  const Tensor part = ops::narrow(tokens, 0, first, rows);
  return {ops::contiguous(ops::narrow(part, 1, 0, kSeq)), ops::contiguous(ops::narrow(part, 1, 1, kSeq))};
}

// kSteps optimizer steps of the Engine, each rank taking its rows of every global batch.
// Every step's reduction of the gradients must pass through the counting communicator.
Trajectory engine_trajectory(engine::Engine& e, parallel::Communicator& world) {
  const int n = world.size(), r = world.rank();
  const int64_t accumulation = e.config().gradient_accumulation_steps, micro = e.config().micro_batch_size;
  const std::string reduction = e.config().zero.stage == 0 ? "all_reduce" : "reduce_scatter";
  Trajectory t;
  for (int64_t step = 0; step < kSteps; ++step) {
    const Tensor tokens = global_tokens(step);
    double local = 0;
    for (int64_t m = 0; m < accumulation; ++m) {
      const auto [inputs, targets] = batch_rows(tokens, (m * n + r) * micro, micro);
      const Tensor loss = e.forward(inputs, targets);
      local += loss.item();
      e.backward(loss);
    }
    const engine::StepResult result = e.step();
    BOOST_TEST(result.comm["by_collective"][reduction]["calls"].get<int64_t>() > 0, "step " << step);
    Tensor sum = Tensor::full({1}, local, DType::f64);
    world.all_reduce(sum)->wait();
    t.losses.push_back(sum.item() / double(n * accumulation));
  }
  e.gather_parameters();  // stage 3: read the parameters in full
  for (const auto& [name, p] : e.model().named_parameters()) t.params.emplace_back(name, host_f32(p));
  e.release_parameters();
  return t;
}

}  // namespace

BOOST_AUTO_TEST_CASE(zero_over_nccl_reproduces_the_single_process_trajectory) {
  const parallel::CommunicatorPtr world = parallel::world();
  BOOST_TEST_REQUIRE(world->name() == "mpi");
  const Device gpu = Device::cuda(parallel::rank_on_node());
  for (int64_t accumulation : {1, 2}) {
    const Trajectory ref = single_process(accumulation, gpu);
    for (int stage : {0, 1, 2, 3}) {
      BOOST_TEST_CONTEXT("stage " << stage << ", accumulation " << accumulation) {
        const engine::TrainConfig c = config(stage, accumulation, "nccl", world->size());
        engine::Engine e(c, engine::process_grid(c, world));
        BOOST_TEST_REQUIRE(e.zero_communicator()->name() == "counting(nccl)");
        BOOST_TEST_REQUIRE(e.device().str() == gpu.str());
        check_same(engine_trajectory(e, *world), ref);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(auto_picks_nccl_for_more_than_one_rank) {
  const parallel::CommunicatorPtr world = parallel::world();
  const engine::TrainConfig automatic_config = config(1, 1, "auto", world->size());
  const engine::Engine automatic(automatic_config, engine::process_grid(automatic_config, world));
  BOOST_TEST(automatic.zero_communicator()->name() == (world->size() > 1 ? "counting(nccl)" : "counting(mpi)"));
  const engine::TrainConfig mpi_config = config(1, 1, "mpi", world->size());
  const engine::Engine mpi(mpi_config, engine::process_grid(mpi_config, world));
  BOOST_TEST(mpi.zero_communicator()->name() == "counting(mpi)");
}
