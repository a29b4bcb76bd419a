// ZeRO stages 0–3 reproduce the single-process trajectory: on every rank, 10 clipped AdamW
// steps of a tiny GPT on the same global batches, once in one process (the reference,
// computed locally) and once data-parallel over all ranks, with and without gradient
// accumulation, and with DeepSpeed's Adam options and per-step betas
// (support/zero_trajectory.h). Losses and final parameters agree within 1e-5 relative.
// With the optimizer's state offloaded to NVMe files, every stage on 1, 2 and 4 ranks
// follows the same run without offload within 1e-6, and so does stage 3 with the parameter
// shards in swap files too (ZeRO-Infinity); so does every stage with the state and the
// update in host memory apart from the device's (ZeRO-Offload's store, forced on the CPU),
// and stage 3 with the parameter shards in host memory, alone or beside that store; and so
// does every stage with only part of the state on the host (offload_optimizer.ratio), split
// by sub-groups as DeepSpeed splits it, its bytes on each side the split's closed form.
// A frozen model partitioned as stage 3 partitions (zero/frozen_partition.h) computes the
// whole model's forward.
#include <boost/test/unit_test.hpp>
#include <numeric>

#include "io/swap_file.h"
#include "parallel/counting_communicator.h"
#include "parallel/runtime.h"
#include "support/check.h"
#include "support/files.h"
#include "support/zero_trajectory.h"
#include "triad.h"
#include "zero/buckets.h"
#include "zero/frozen_partition.h"
#include "zero/zero_optimizer.h"

BOOST_AUTO_TEST_SUITE(test_zero_mpi)

using namespace triad;
using namespace triad::test;

namespace {

// The groups the offload cases run on: the world split into groups of 1, 2 and 4 ranks, each
// group size where it is at least half the world (1 and 2 under np 2, 2 and 4 under np 4, 4
// under np 8; CTest runs all three), so that no entry runs many single-rank copies of a case
// at once. Each with its size, in the same order on every rank.
std::vector<std::pair<int, parallel::CommunicatorPtr>> zero_mpi_offload_groups() {
  const parallel::CommunicatorPtr world = parallel::world();
  const int n = world->size(), r = world->rank();
  std::vector<std::pair<int, parallel::CommunicatorPtr>> groups;
  for (int ranks : {1, 2, 4})
    if (n % ranks == 0 && 2 * ranks >= n) groups.emplace_back(ranks, world->split(r / ranks, r));
  return groups;
}

// What the steps of a run moved through the parameter swap (Note [Offloaded parameters]),
// and the rank's shards and memory after its last step, from DataParallelRun::around_step.
struct ZeroMpiSwapCounts {
  int64_t reads = 0, writes = 0, arrivals = 0, steps = 0;
  int64_t groups = 0, elements = 0;  // partitioned groups; the rank's shard elements
  zero::ResidentBytes memory;

  std::function<void(const zero::ZeroOptimizer&, bool)> observer(int ranks) {
    return [this, ranks](const zero::ZeroOptimizer& opt, bool after) {
      const int64_t sign = after ? 1 : -1;
      reads += sign * opt.param_swap()->read_times().reads;
      writes += sign * opt.param_swap()->writes();
      arrivals += sign * opt.param_swap()->arrivals();
      if (!after) return;
      ++steps;
      groups = elements = 0;
      for (const auto& [padded, partitioned] : opt.group_sizes()) {
        groups += partitioned;
        elements += padded / ranks;
      }
      memory = opt.memory();
    };
  }
};

Trajectory data_parallel(int stage, int64_t accumulation, int64_t persist = 0, DType dtype = DType::f32,
                         int64_t prefetch = 50000000, int64_t bucket = 500000000) {
  return test::data_parallel(parallel::world(), {.stage = stage,
                                                 .accumulation = accumulation,
                                                 .persist = persist,
                                                 .dtype = dtype,
                                                 .prefetch = prefetch,
                                                 .bucket = bucket});
}

}  // namespace

BOOST_AUTO_TEST_CASE(stages_reproduce_the_single_process_trajectory) {
  for (int64_t accumulation : {1, 2}) {
    const Trajectory ref = single_process(accumulation);
    for (int stage : {0, 1, 2, 3}) {
      BOOST_TEST_CONTEXT("stage " << stage << ", accumulation " << accumulation) {
        check_same(data_parallel(stage, accumulation), ref);
      }
    }
    BOOST_TEST_CONTEXT("stage 3 prefetching one unit at a time, accumulation " << accumulation) {
      check_same(data_parallel(3, accumulation, 0, DType::f32, /*prefetch=*/0), ref);
    }
    BOOST_TEST_CONTEXT("stage 3 with small parameters kept whole, accumulation " << accumulation) {
      check_same(data_parallel(3, accumulation, /*persist=*/1000), ref);  // all but the 1024-element matrices
    }
    for (int stage : {0, 1, 2, 3}) {
      BOOST_TEST_CONTEXT("stage " << stage << " with gradients predivided by 3, accumulation " << accumulation) {
        check_same(test::data_parallel(parallel::world(),
                                       {.stage = stage, .accumulation = accumulation, .predivide = 3.0}),
                   ref);
      }
      BOOST_TEST_CONTEXT("stage " << stage << " in buckets of 100 elements, accumulation " << accumulation) {
        check_same(data_parallel(stage, accumulation, 0, DType::f32, 50000000, /*bucket=*/100), ref);
      }
    }
  }
}

// ZeRO-Offload to NVMe (Note [Offloaded optimizer state]): the same update on state read
// back from files. Sub-groups of 100 elements through two buffers, read ahead and written
// behind, in f32 (moments only: the parameters are their own master weights); sub-groups of
// 700 through one buffer, read and written in turn, in bf16 (master weights too, against
// the bf16 run without offload). Gradient accumulation 2, clipping at 0.5.
BOOST_AUTO_TEST_CASE(offloading_to_nvme_follows_the_run_without_it) {
  test::TempDir dir;  // this rank's own
  struct Variant {
    DType dtype;
    int64_t sub_group_size, buffers;
    bool pipelined;
  };
  for (const auto& [ranks, comm] : zero_mpi_offload_groups()) {
    for (int stage : {1, 2, 3})
      for (const Variant& v : {Variant{DType::f32, 100, 2, true}, Variant{DType::bf16, 700, 1, false}}) {
        BOOST_TEST_CONTEXT(ranks << " ranks, stage " << stage << ", " << dtype_name(v.dtype)) {
          const test::DataParallelRun plain{.stage = stage, .accumulation = 2, .dtype = v.dtype};
          test::DataParallelRun offloaded = plain;
          offloaded.offload = {.device = zero::OffloadDevice::nvme,
                               .nvme_path = dir.path().string(),
                               .buffer_count = v.buffers,
                               .pipeline_read = v.pipelined,
                               .pipeline_write = v.pipelined};
          offloaded.sub_group_size = v.sub_group_size;
          check_same(test::data_parallel(comm, offloaded), test::data_parallel(comm, plain), 1e-6);
        }
      }
  }
  BOOST_TEST(std::filesystem::is_empty(dir.path()));  // the state files went with their optimizers
}

// ZeRO-Offload to host memory (Note [Host optimizer step]), run on the CPU training device
// through the internal switch that a GPU does not need: the state in the store's own
// buffers, each step's gradients copied in and new parameters copied out, Adam on the host.
// f32 and bf16 (master weights on the host, 16-bit parameters copied back), gradient
// accumulation 2, clipping at 0.5: the run without offload within 1e-6.
BOOST_AUTO_TEST_CASE(offloading_to_host_memory_follows_the_run_without_it) {
  for (const auto& [ranks, comm] : zero_mpi_offload_groups()) {
    for (int stage : {1, 2, 3})
      for (DType dtype : {DType::f32, DType::bf16}) {
        BOOST_TEST_CONTEXT(ranks << " ranks, stage " << stage << ", " << dtype_name(dtype)) {
          const test::DataParallelRun plain{.stage = stage, .accumulation = 2, .dtype = dtype};
          test::DataParallelRun offloaded = plain;
          offloaded.offload = {.device = zero::OffloadDevice::cpu, .pin_memory = true, .host_store_on_cpu = true};
          check_same(test::data_parallel(comm, offloaded), test::data_parallel(comm, plain), 1e-6);
        }
      }
  }
}

// Note [Partial offload]: with offload_optimizer.ratio below 1 the first sub-groups' state
// stays on the device and the others' is updated on the host (the host store forced on the
// CPU as above), groups cut into sub-groups of 300 elements: ratio 0.5, the ratio that
// leaves only the last sub-group on the host and the one that keeps only the first on the
// device, and (stage 3) 0.5 beside the parameter shards in host memory, whose groups wholly
// on the host are updated in place and the others brought in. Stages 1-3, f32 and bf16,
// gradient accumulation 2, clipping at 0.5: the run without offload within 1e-6. The
// store's bytes are the split's: of the rank's S elements, D in the first sub-groups whose
// elements add up to at most (1 - ratio) S on the device (moments, and in mixed precision
// master weights: 8 or 12 bytes each) and S - D in the host store (16 or 18: Note [Host
// optimizer step]), both in optim_bytes on the CPU training device.
BOOST_AUTO_TEST_CASE(offloading_part_of_the_state_to_host_memory_follows_the_run_without_it) {
  constexpr int64_t sub_group = 300;
  for (const auto& [ranks, comm] : zero_mpi_offload_groups()) {
    for (int stage : {1, 2, 3})
      for (DType dtype : {DType::f32, DType::bf16}) {
        const test::DataParallelRun plain{.stage = stage, .accumulation = 2, .dtype = dtype};
        const Trajectory ref = test::data_parallel(comm, plain);
        // The rank's sub-groups in order: each group's shard cut into pieces of sub_group.
        std::vector<int64_t> sizes;
        {
          zero::ZeroOptimizer probe(test::make_model(), {.stage = stage, .dtype = dtype}, test::kAdam, test::kDecay,
                                    comm);
          for (const auto& [padded, _] : probe.group_sizes())
            for (int64_t first = 0; first < padded / ranks; first += sub_group)
              sizes.push_back(std::min(sub_group, padded / ranks - first));
        }
        BOOST_TEST_REQUIRE(sizes.size() >= 4u);
        const int64_t total = std::accumulate(sizes.begin(), sizes.end(), int64_t(0));
        int64_t half = 0;  // the longest run of first sub-groups within half the state
        for (int64_t end = 0; int64_t s : sizes)
          if ((end += s) <= total / 2) half = end;
        struct Case {
          const char* name;
          double ratio;
          int64_t device;  // elements expected on the device
          bool params_on_host;
        };
        const double s = double(total);
        const std::vector<Case> cases = {
            {"ratio 0.5", 0.5, half, false},
            {"only the last sub-group offloaded", (double(sizes.back()) - 0.5) / s, total - sizes.back(), false},
            {"only the first sub-group kept", 1.0 - (double(sizes.front()) + 0.5) / s, sizes.front(), false},
            {"ratio 0.5, parameters in host memory", 0.5, half, true}};
        for (const Case& c : cases) {
          if (c.params_on_host && stage != 3) continue;
          BOOST_TEST_CONTEXT(ranks << " ranks, stage " << stage << ", " << dtype_name(dtype) << ", " << c.name) {
            test::DataParallelRun offloaded = plain;
            offloaded.offload = {
                .device = zero::OffloadDevice::cpu, .pin_memory = true, .ratio = c.ratio, .host_store_on_cpu = true};
            offloaded.sub_group_size = sub_group;
            if (c.params_on_host)
              offloaded.offload_param = {.device = zero::OffloadDevice::cpu, .host_store_on_cpu = true};
            zero::ResidentBytes memory;
            offloaded.around_step = [&](const zero::ZeroOptimizer& opt, bool after) {
              if (after) memory = opt.memory();
            };
            check_same(test::data_parallel(comm, offloaded), ref, 1e-6);
            const bool f32 = dtype == DType::f32;
            if (!c.params_on_host)  // (in place, the host store's parameters are the shards' buffers)
              BOOST_TEST(memory.optim_bytes == (f32 ? 8 : 12) * c.device + (f32 ? 16 : 18) * (total - c.device));
            BOOST_TEST(memory.nvme_bytes == 0);
          }
        }
      }
  }
}

// Note [Offloaded gradients]: at stages 2 and 3 with the optimizer's state on NVMe, the
// rank's reduced gradient goes to the swap file sub-group by sub-group, so what a step leaves
// in the CPU allocator's live bytes beyond the model's parameters (memory().param_bytes) is the store's buffers
// (memory().optim_bytes) and a few pages: less than the f32 gradient shard alone (and the
// moments), which a run with the state in memory keeps, as its live bytes show.
BOOST_AUTO_TEST_CASE(offloaded_gradients_leave_a_steps_memory_bounded_by_the_buffers) {
  const parallel::CommunicatorPtr world = parallel::world();
  test::TempDir dir;
  for (int stage : {2, 3}) {
    int64_t resident[2] = {0, 0}, optim_bytes = 0, shard_bytes = 0;
    for (bool offloaded : {false, true}) {
      const Tensor tokens = global_tokens(0);
      cpu_allocator().empty_cache();
      const auto before = int64_t(cpu_allocator().bytes_in_use());
      auto model = std::make_shared<nn::GPT>(
          nn::GPTConfig{.n_layer = 2, .n_head = 2, .d_model = 64, .seq_len = kSeq, .vocab_size = 512, .init_seed = 11});
      zero::ZeroConfig config{.stage = stage, .sub_group_size = 4096};
      if (offloaded)
        config.offload_optimizer = {.device = zero::OffloadDevice::nvme, .nvme_path = dir.path().string(),
                                    .buffer_count = 2};
      zero::ZeroOptimizer opt(model, config, kAdam, kDecay, world);
      const int64_t rows = kGlobalBatch / (2 * world->size());
      for (int64_t m = 0; m < 2; ++m) {
        const Tensor l = loss_of(*model, tokens, (m * world->size() + world->rank()) * rows, rows);
        opt.begin_backward(m == 1);
        backward(l, Tensor::full({}, 0.5));
      }
      opt.step(kLr, kClip);
      cpu_allocator().empty_cache();
      const zero::ResidentBytes mem = opt.memory();
      resident[offloaded] = int64_t(cpu_allocator().bytes_in_use()) - before - mem.param_bytes;
      if (offloaded) {
        optim_bytes = mem.optim_bytes;
        BOOST_TEST(mem.grad_bytes == 0);
        for (const auto& [padded, _] : opt.group_sizes()) shard_bytes += padded / world->size() * 4;
      }
    }
    BOOST_TEST_CONTEXT("stage " << stage << ": " << resident[1] << " bytes live with offload (buffers "
                                << optim_bytes << "), " << resident[0] << " without; gradient shard "
                                << shard_bytes) {
      BOOST_TEST(resident[1] <= optim_bytes + 16 * 1024);
      BOOST_TEST(resident[1] - optim_bytes < shard_bytes / 4);
      BOOST_TEST(resident[0] >= 3 * shard_bytes);  // in memory: the gradient shard and the two moments
    }
  }
}

// ZeRO-Infinity (Note [Offloaded parameters]): each rank's parameter shards in a swap file,
// read in before each gather and written back after the step, beside the optimizer's state
// on NVMe, in f32 and bf16 with gradient accumulation 2 and clipping at 0.5. Two buffers
// (every unit's two groups, no prefetch of the next unit) and DeepSpeed's five (the next
// unit prefetched); the swap asserts that no more shards than buffers are ever in memory.
// Each step writes every shard (G per step, G the partitioned groups) and reads it in for
// the update in f32 only (mixed precision writes it whole from the master weights). The same
// with the optimizer's state and update in host memory instead (two buffers), where in mixed
// precision no shard comes into memory for the update at all (Note [Parameters updated in
// place]: the host update's buffer is written to the file).
BOOST_AUTO_TEST_CASE(offloading_parameters_to_nvme_follows_the_run_without_it) {
  test::TempDir dir;
  for (const auto& [ranks, comm] : zero_mpi_offload_groups()) {
    for (DType dtype : {DType::f32, DType::bf16}) {
      const test::DataParallelRun plain{.stage = 3, .accumulation = 2, .dtype = dtype};
      const Trajectory ref = test::data_parallel(comm, plain);
      for (const auto& [buffers, host_store] : {std::pair<int64_t, bool>{2, false}, {5, false}, {2, true}}) {
        BOOST_TEST_CONTEXT(ranks << " ranks, " << dtype_name(dtype) << ", " << buffers << " parameter buffers"
                                 << (host_store ? ", optimizer on the host" : "")) {
          test::DataParallelRun offloaded = plain;
          offloaded.offload = {.device = zero::OffloadDevice::nvme,
                               .nvme_path = dir.path().string(),
                               .pipeline_read = true,
                               .pipeline_write = true};
          if (host_store) offloaded.offload = {.device = zero::OffloadDevice::cpu, .host_store_on_cpu = true};
          offloaded.sub_group_size = 300;
          offloaded.offload_param = {.device = zero::OffloadDevice::nvme,
                                     .nvme_path = dir.path().string(),
                                     .buffer_count = buffers};
          ZeroMpiSwapCounts c;
          offloaded.around_step = c.observer(ranks);
          check_same(test::data_parallel(comm, offloaded), ref, 1e-6);
          BOOST_TEST(c.groups > 0);
          BOOST_TEST(c.writes == c.groups * test::kSteps);
          BOOST_TEST(c.reads == (dtype == DType::f32 ? c.groups * test::kSteps : 0));
          BOOST_TEST(c.arrivals == (dtype == DType::f32 || !host_store ? c.groups * test::kSteps : 0));
          // The host store per shard element (the CPU device's memory): master weights, both
          // moments and the gradient, and in mixed precision the new parameters' buffer.
          if (host_store) BOOST_TEST(c.memory.optim_bytes == c.elements * (dtype == DType::f32 ? 16 : 18));
        }
      }
    }
  }
  BOOST_TEST(std::filesystem::is_empty(dir.path()));  // the swap files went with their optimizers
}

// ZeRO-Offload of the parameters (Note [Offloaded parameters]), run on the CPU training
// device through the internal switch that a GPU does not need: each rank's parameter shards
// in host buffers of their own, copied to separate device shards before each gather and back
// after the step. Alone, and beside the optimizer's state and update on the host (DeepSpeed's
// "ZeRO-3 with both offloads"); f32 and bf16, gradient accumulation 2, clipping at 0.5; two
// buffers (a unit's two groups, no prefetch of the next unit) and DeepSpeed's five: the run
// without offload within 1e-6, no more shards than buffers ever on the device (the swap
// asserts it). What each step moves: alone, every shard is written back (G per step, G the
// partitioned groups) and read in for the update in f32 only (mixed precision writes it
// whole from the master weights); with both offloads the host update writes each shard
// where it lives (Note [Parameters updated in place]): the step reads and writes none, the
// host holds the shards once (none in the optimizer's store) and the run is the run without
// offload bit for bit.
BOOST_AUTO_TEST_CASE(offloading_parameters_to_host_memory_follows_the_run_without_it) {
  for (const auto& [ranks, comm] : zero_mpi_offload_groups()) {
    for (DType dtype : {DType::f32, DType::bf16}) {
      const test::DataParallelRun plain{.stage = 3, .accumulation = 2, .dtype = dtype};
      const Trajectory ref = test::data_parallel(comm, plain);
      for (bool both : {false, true})
        for (int64_t buffers : {2, 5}) {
          BOOST_TEST_CONTEXT(ranks << " ranks, " << dtype_name(dtype) << ", " << buffers << " parameter buffers"
                                   << (both ? ", optimizer on the host too" : "")) {
            test::DataParallelRun offloaded = plain;
            offloaded.offload_param = {
                .device = zero::OffloadDevice::cpu, .pin_memory = true, .buffer_count = buffers, .host_store_on_cpu = true};
            if (both)
              offloaded.offload = {.device = zero::OffloadDevice::cpu, .pin_memory = true, .host_store_on_cpu = true};
            ZeroMpiSwapCounts c;
            offloaded.around_step = c.observer(ranks);
            const Trajectory got = test::data_parallel(comm, offloaded);
            check_same(got, ref, 1e-6);
            BOOST_TEST(c.steps == test::kSteps);
            BOOST_TEST(c.groups > 0);
            BOOST_TEST(c.writes == (both ? 0 : c.groups * c.steps));
            BOOST_TEST(c.reads == (both || dtype != DType::f32 ? 0 : c.groups * c.steps));
            BOOST_TEST(c.arrivals == (both ? 0 : c.groups * c.steps));
            if (both) {
              // Every group is partitioned (persistence threshold 0): per shard element, the
              // slot (e bytes, host_bytes) and the store's moments and gradient (12), and in
              // mixed precision its master weights (4; f32's are the slot), which count as
              // the CPU training device's (optim_bytes).
              const int64_t e = int64_t(element_size(dtype));
              BOOST_TEST(c.memory.host_bytes == c.elements * e);
              BOOST_TEST(c.memory.optim_bytes == c.elements * (12 + (dtype == DType::f32 ? 0 : 4)));
              for (size_t i = 0; i < ref.params.size(); ++i)
                BOOST_TEST(max_abs_diff(got.params[i].second, ref.params[i].second) == 0.0, ref.params[i].first);
              BOOST_TEST(got.losses == ref.losses, boost::test_tools::per_element());
            }
          }
        }
    }
  }
}

// A checkpoint's views of parameters in host memory (Note [Streamed checkpoints]): each batch
// of groups comes onto the device on its own (never more than the largest shard at once),
// and what is written through its slices and committed goes back to host memory: the next
// gather reads it, on every rank.
BOOST_AUTO_TEST_CASE(views_of_parameters_in_host_memory_commit_batch_by_batch) {
  const parallel::CommunicatorPtr world = parallel::world();
  auto model = make_model();
  zero::ZeroOptimizer opt(model,
                          {.stage = 3,
                           .stage3_param_persistence_threshold = 0,
                           .offload_param = {.device = zero::OffloadDevice::cpu,
                                             .buffer_count = 2,
                                             .host_store_on_cpu = true}},
                          kAdam, kDecay, world);
  const std::vector<zero::ZeroOptimizer::ViewBatch> batches = opt.view_batches();
  BOOST_TEST(batches.size() > 1u);
  const auto value = [](int64_t element) { return float(element % 1000) * 1e-3f; };
  for (const zero::ZeroOptimizer::ViewBatch& batch : batches) {
    zero::ZeroOptimizer::StateView view = opt.state_view(zero::ZeroOptimizer::State::param, batch);
    for (const zero::ZeroOptimizer::Slice& slice : view.owned_slices()) {
      std::vector<float> v(size_t(slice.values.numel()));
      for (size_t i = 0; i < v.size(); ++i) v[i] = value(slice.first + int64_t(i));
      ops::copy_(slice.values, Tensor::from_vector(v, {slice.values.numel()}));
    }
    view.commit();
  }
  int64_t largest = 0;
  for (const auto& [padded, _] : opt.group_sizes()) largest = std::max(largest, 4 * padded / world->size());
  BOOST_TEST(opt.param_swap()->peak_resident_bytes() > 0);
  BOOST_TEST(opt.param_swap()->peak_resident_bytes() <= largest);
  opt.gather_all();
  for (const auto& [name, p] : model->named_parameters()) {
    const std::vector<float> got = ops::contiguous(host_f32(p)).to_vector<float>();
    std::vector<float> expected(got.size());
    for (size_t i = 0; i < got.size(); ++i) expected[i] = value(int64_t(i));
    BOOST_TEST(got == expected, name);
  }
  opt.release_all();
}

// Note [Parameters updated in place]: what a checkpoint writes through the views and
// commits (into the host shards, which the host store updates in place) is what the next
// update reads: with both offloads to host memory, f32 and bf16, one step from written
// parameters (and master weights) leaves the parameters of the run without offload, bit
// for bit.
BOOST_AUTO_TEST_CASE(a_step_after_a_commit_updates_the_committed_host_shards) {
  const parallel::CommunicatorPtr world = parallel::world();
  const int n = world->size(), r = world->rank();
  using State = zero::ZeroOptimizer::State;
  for (DType dtype : {DType::f32, DType::bf16}) {
    std::vector<Tensor> after[2];
    for (bool offloaded : {false, true}) {
      auto model = make_model();
      zero::ZeroConfig config{.stage = 3, .dtype = dtype, .stage3_param_persistence_threshold = 0};
      if (offloaded) {
        config.offload_optimizer = {.device = zero::OffloadDevice::cpu, .host_store_on_cpu = true};
        config.offload_param = {.device = zero::OffloadDevice::cpu, .host_store_on_cpu = true};
      }
      zero::ZeroOptimizer opt(model, config, kAdam, kDecay, world);
      BOOST_TEST((opt.param_swap() != nullptr) == offloaded);
      for (const zero::ZeroOptimizer::ViewBatch& batch : opt.view_batches())
        for (State state : {State::param, State::master}) {
          if (state == State::master && dtype == DType::f32) continue;  // the parameters are the master weights
          zero::ZeroOptimizer::StateView view = opt.state_view(state, batch);
          for (const zero::ZeroOptimizer::Slice& slice : view.owned_slices()) {
            std::vector<float> v(size_t(slice.values.numel()));
            for (size_t i = 0; i < v.size(); ++i) v[i] = 0.05f * std::sin(0.37f * float(slice.first + int64_t(i)));
            ops::copy_(slice.values, Tensor::from_vector(v, {slice.values.numel()}));
          }
          view.commit();
        }
      const int64_t micro = kGlobalBatch / n;
      const Tensor loss = loss_of(*model, global_tokens(0), r * micro, micro);
      opt.begin_backward(true);
      backward(loss);
      opt.step(kLr, kClip);
      opt.gather_all();
      for (const Tensor& p : model->parameters()) after[offloaded].push_back(host_f32(p));
      opt.release_all();
    }
    for (size_t i = 0; i < after[0].size(); ++i)
      BOOST_TEST(max_abs_diff(after[1][i], after[0][i]) == 0.0, dtype_name(dtype) << " parameter " << i);
  }
}

namespace {

// The single-process run with the delay applied by hand (Note [Delayed parameter update]):
// the step after a delayed one takes its gradient at the weights before that one's update,
// which then applies; step `skip` is not taken (no update, none left pending) and the
// update pending after step `flush` is applied then.
Trajectory delayed_single_process(int64_t accumulation, int64_t warmup, int64_t skip = -1, int64_t flush = -1) {
  auto model = make_model();
  const std::vector<Tensor> params = model->parameters();
  optim::AdamW opt(optim::decay_groups(params, kDecay), kAdam);
  const auto weights = [&] {
    std::vector<Tensor> w;
    for (const Tensor& p : params) w.push_back(ops::clone(p));
    return w;
  };
  const auto set_weights = [&](const std::vector<Tensor>& w) {
    NoGradGuard no_grad;
    for (size_t i = 0; i < params.size(); ++i) ops::copy_(params[i], w[i]);
  };
  std::vector<Tensor> stale;  // the weights before the pending update (empty: none pending)
  int64_t taken = 0;
  Trajectory t;
  const int64_t rows = kGlobalBatch / accumulation;
  for (int64_t step = 0; step < kSteps; ++step) {
    std::vector<Tensor> current;
    if (!stale.empty()) current = weights(), set_weights(stale);
    double loss = 0;
    for (int64_t m = 0; m < accumulation; ++m) {
      const Tensor l = loss_of(*model, global_tokens(step), m * rows, rows);
      loss += l.item() / double(accumulation);
      backward(l, Tensor::full({}, 1.0 / double(accumulation)));
    }
    t.losses.push_back(loss);
    if (!stale.empty()) set_weights(current);  // the gradients stay where they are
    stale.clear();
    if (step == skip) {
      opt.zero_grad();
      continue;
    }
    optim::clip_grad_norm(params, kClip);
    if (taken++ >= warmup) stale = weights();
    opt.step();
    opt.zero_grad();
    if (step == flush) stale.clear();
  }
  for (const auto& [name, p] : model->named_parameters()) t.params.emplace_back(name, host_f32(p));
  return t;
}

}  // namespace

// The delayed parameter update (Note [Delayed parameter update]) after 3 ordinary steps
// follows the single-process run that delays by hand, at every stage on 1 and 2 ranks, with
// the optimizer's state in memory, on NVMe, in the host store and (stage 2) half in it
// (Note [Partial offload], on the CPU training device), with gradient accumulation 2 and clipping at
// 0.5 (within 1e-5 as any layout); with no warm-up; with an overflowing step skipped
// (which applies the pending update and starts none) and the pending update applied
// mid-run, as a checkpoint does. The final parameters hold every update (gather_all applies
// the last). The delay changes the run: one step after the warm-up its loss differs from
// the run without it.
BOOST_AUTO_TEST_CASE(a_delayed_update_follows_the_run_delayed_by_hand) {
  const parallel::CommunicatorPtr world = parallel::world();
  const int n = world->size(), r = world->rank();
  test::TempDir dir;
  const Trajectory ref = delayed_single_process(2, 3);
  const Trajectory plain = single_process(2);
  BOOST_TEST(std::abs(ref.losses[4] - plain.losses[4]) > 1e-4 * plain.losses[4]);
  BOOST_TEST(std::abs(ref.losses[3] - plain.losses[3]) < 1e-6 * plain.losses[3]);  // the 4th gradient is not yet stale
  const Trajectory at_once = delayed_single_process(1, 0), skipped = delayed_single_process(2, 1, 6, 3);
  for (int ranks : {1, 2}) {
    if (n % ranks != 0) continue;
    const parallel::CommunicatorPtr comm = world->split(r / ranks, r);
    for (int stage : {0, 1, 2, 3})
      for (zero::OffloadDevice where : {zero::OffloadDevice::none, zero::OffloadDevice::nvme, zero::OffloadDevice::cpu}) {
        if (where != zero::OffloadDevice::none && stage == 0) continue;  // offload runs at stages 1-3
        const char* place = where == zero::OffloadDevice::nvme ? ", state on NVMe"
                            : where == zero::OffloadDevice::cpu ? ", state and update in the host store"
                                                                : "";
        BOOST_TEST_CONTEXT(ranks << " ranks, stage " << stage << place) {
          test::DataParallelRun run{.stage = stage, .accumulation = 2, .delayed = {.enabled = true, .warmup_steps = 3}};
          if (where == zero::OffloadDevice::nvme) {
            run.offload = {.device = zero::OffloadDevice::nvme,
                           .nvme_path = dir.path().string(),
                           .buffer_count = 2,
                           .pipeline_read = true,
                           .pipeline_write = true};
            run.sub_group_size = 300;
          }
          if (where == zero::OffloadDevice::cpu)  // (Note [Host optimizer step]; the GPU's delayed update)
            run.offload = {.device = zero::OffloadDevice::cpu, .pin_memory = true, .host_store_on_cpu = true};
          check_same(test::data_parallel(comm, run), ref);
        }
      }
    BOOST_TEST_CONTEXT(ranks << " ranks, stage 2, half the state in the host store") {  // (Note [Partial offload])
      test::DataParallelRun run{.stage = 2, .accumulation = 2, .delayed = {.enabled = true, .warmup_steps = 3}};
      run.offload = {.device = zero::OffloadDevice::cpu, .ratio = 0.5, .host_store_on_cpu = true};
      run.sub_group_size = 300;
      check_same(test::data_parallel(comm, run), ref);
    }
    BOOST_TEST_CONTEXT(ranks << " ranks, stage 2, no warm-up") {
      check_same(test::data_parallel(comm, {.stage = 2, .delayed = {.enabled = true, .warmup_steps = 0}}), at_once);
    }
    BOOST_TEST_CONTEXT(ranks << " ranks, stage 3, step 7 skipped, the update pending after step 4 applied") {
      check_same(
          test::data_parallel(
              comm,
              {.stage = 3, .accumulation = 2, .delayed = {.enabled = true, .warmup_steps = 1}, .skip = 6, .flush = 3}),
          skipped);
    }
  }
  BOOST_TEST(std::filesystem::is_empty(dir.path()));
}

// The update runs on its thread after step() returns; the next step() applies it. memory()
// counts the copies it works on as buffer_bytes.
BOOST_AUTO_TEST_CASE(a_delayed_update_is_pending_between_steps) {
  const parallel::CommunicatorPtr world = parallel::world();
  auto model = make_model();
  zero::ZeroOptimizer opt(model, {.stage = 1, .delayed_update = {.enabled = true, .warmup_steps = 1}}, kAdam, kDecay,
                          world);
  const int64_t micro = kGlobalBatch / world->size();
  for (int64_t step = 0; step < 3; ++step) {
    opt.begin_backward(true);
    backward(loss_of(*model, global_tokens(step), world->rank() * micro, micro), Tensor::full({}, 1.0));
    const std::vector<Tensor> before = model->parameters();
    std::vector<Tensor> copies;
    for (const Tensor& p : before) copies.push_back(ops::clone(p));
    opt.step(kLr, kClip);
    BOOST_TEST(opt.update_pending() == (step >= 1), "step " << step);
    // Step 2 applied step 1's update: the parameters moved; step 1's left them as they were.
    double moved = 0;
    for (size_t i = 0; i < before.size(); ++i) moved = std::max(moved, test::max_abs_diff(before[i], copies[i]));
    BOOST_TEST((moved > 0) == (step != 1), "step " << step);
  }
  opt.apply_pending_update();
  BOOST_TEST(!opt.update_pending());
  BOOST_TEST(opt.counters().steps == 3);
  // Its copies: the rank's f32 parameter shard and gradient shard, 8 bytes per element.
  int64_t shards = 0;
  for (const auto& [padded, _] : opt.group_sizes()) shards += padded / world->size();
  BOOST_TEST(opt.memory().buffer_bytes == 8 * shards);
}

// DeepSpeed's Adam options (L2 weight decay, no bias correction) with betas that change every
// step (OneCycle's momentum) reproduce optim::AdamW's trajectory with the same options.
BOOST_AUTO_TEST_CASE(adam_modes_and_scheduled_betas_reproduce_the_single_process_trajectory) {
  const AdamRun adam{.options = {.lr = kLr, .eps = 1e-8, .adam_w_mode = false, .bias_correction = false},
                     .scheduled_betas = true};
  const Trajectory ref = single_process(1, Device::cpu(), adam);
  for (int stage : {0, 1, 2, 3}) {
    BOOST_TEST_CONTEXT("stage " << stage) {
      check_same(test::data_parallel(parallel::world(), {.stage = stage, .adam = adam}), ref);
    }
  }
}

BOOST_AUTO_TEST_CASE(bucketed_collectives_equal_whole_ones) {
  // Rank r's element i of an n S buffer is 1000 r + i: closed-form sums and gathers for
  // buckets smaller than a shard, not dividing it, and larger than everything.
  const auto counting = std::make_shared<parallel::CountingCommunicator>(parallel::world());
  const int n = counting->size(), r = counting->rank();
  for (int64_t shard : {1, 7, 64}) {
    for (int64_t bucket : {1, 3, 5 * n, 1000}) {
      BOOST_TEST_CONTEXT("shard " << shard << ", bucket " << bucket) {
        const int64_t total = n * shard;
        std::vector<float> mine(total);
        for (int64_t i = 0; i < total; ++i) mine[i] = float(1000 * r + i);
        const double rank_sum = 1000.0 * n * (n - 1) / 2;

        counting->reset();
        Tensor reduced = Tensor::from_vector(mine, {total});
        zero::bucketed_all_reduce(*counting, reduced, bucket)->wait();
        std::vector<float> got = reduced.to_vector<float>();
        for (int64_t i = 0; i < total; ++i) BOOST_TEST(got[i] == rank_sum + double(n) * i);
        BOOST_TEST(counting->stats().at("all_reduce").calls == (total + bucket - 1) / bucket);

        Tensor scattered = Tensor::empty({shard});
        zero::bucketed_reduce_scatter(*counting, Tensor::from_vector(mine, {total}), scattered, bucket)->wait();
        got = scattered.to_vector<float>();
        for (int64_t i = 0; i < shard; ++i) BOOST_TEST(got[i] == rank_sum + double(n) * (r * shard + i));

        Tensor gathered = Tensor::empty({total});
        const Tensor input = ops::narrow(Tensor::from_vector(mine, {total}), 0, 0, shard);
        const parallel::WorkPtr work = zero::bucketed_all_gather(*counting, input, gathered, bucket);
        while (!work->test()) {
        }  // test() drives the pieces and copies each one out as it completes
        got = gathered.to_vector<float>();
        for (int q = 0; q < n; ++q)
          for (int64_t i = 0; i < shard; ++i) BOOST_TEST(got[q * shard + i] == float(1000 * q + i));
        // The volume does not depend on the bucket: bus bytes of one all-reduce, one
        // reduce-scatter and an all-gather of n S floats.
        const double expected = 4.0 * total * (n - 1.0) / n * (2 + 1 + 1);
        BOOST_TEST(std::abs(counting->bus_bytes() - expected) < 1e-6 * expected);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(units_follow_the_wrap_policy) {
  auto model = make_model();
  const std::vector<zero::Unit> units = zero::make_units(model, {});
  BOOST_TEST_REQUIRE(units.size() == 3u);  // root (embeddings, head, final norm), two blocks
  BOOST_TEST(units[0].name == "");
  BOOST_TEST(units[1].name == "blocks.0");
  BOOST_TEST(units[2].name == "blocks.1");
  int64_t total = 0;
  for (const zero::Unit& u : units)
    for (const auto& [_, p] : u.params) total += p.numel();
  BOOST_TEST(total == model->num_parameters());
  // By size: each block (3,296 parameters) and nothing inside one; the GPT itself is the root.
  const auto by_size = zero::make_units(model, {.module_types = {}, .min_params = 3000});
  BOOST_TEST(by_size.size() == 3u);
}

BOOST_AUTO_TEST_CASE(memory_matches_the_stage_formulas) {
  const parallel::CommunicatorPtr world = parallel::world();
  const int64_t n = world->size();
  for (int stage : {0, 1, 2, 3}) {
    auto model = make_model();
    zero::ZeroOptimizer opt(model, {.stage = stage, .stage3_param_persistence_threshold = 0}, kAdam, kDecay, world);
    const zero::ResidentBytes m = opt.memory();
    const double psi = double(model->num_parameters());
    const double shard = psi / double(n);
    // fp32: parameters 4Ψ (stages 0–2) or 4Ψ/n; gradients 4Ψ (stages 0, 1) or 4Ψ/n; Adam's two
    // moments 8Ψ (stage 0) or 8Ψ/n. Padding adds at most n elements per group.
    const double params = 4 * (stage <= 2 ? psi : shard);
    BOOST_TEST(std::abs(m.param_bytes - params) / params < 0.05);
    BOOST_TEST(std::abs(m.grad_bytes - 4 * (stage <= 1 ? psi : shard)) / (4 * (stage <= 1 ? psi : shard)) < 0.05);
    BOOST_TEST(std::abs(m.optim_bytes - 8 * (stage == 0 ? psi : shard)) / (8 * (stage == 0 ? psi : shard)) < 0.05);
    BOOST_TEST(m.host_bytes == 0);
    BOOST_TEST(m.nvme_bytes == 0);
  }
  // ZeRO-Infinity on the CPU: the swap files hold each group's shard of the parameters, of
  // both moments and of the gradient (Note [Offloaded gradients]), each padded to 4096 bytes;
  // the parameters in memory are at most two buffers of the largest shard, the gradients
  // none; no host memory apart from the device's.
  test::TempDir dir;
  auto model = make_model();
  zero::ZeroOptimizer opt(model,
                          {.stage = 3,
                           .stage3_param_persistence_threshold = 0,
                           .offload_optimizer = {.device = zero::OffloadDevice::nvme, .nvme_path = dir.path().string()},
                           .offload_param = {.device = zero::OffloadDevice::nvme,
                                             .nvme_path = dir.path().string(),
                                             .buffer_count = 2}},
                          kAdam, kDecay, world);
  const zero::ResidentBytes m = opt.memory();
  int64_t files = 0, largest = 0, all = 0;
  for (const auto& [padded, partitioned] : opt.group_sizes()) {
    BOOST_TEST(partitioned);
    const int64_t bytes = 4 * padded / n;
    files += 4 * io::align_up(bytes);
    largest = std::max(largest, bytes);
    all += bytes;
  }
  BOOST_TEST(m.nvme_bytes == files);
  BOOST_TEST(m.param_bytes == std::min(all, 2 * largest));
  BOOST_TEST(m.grad_bytes == 0);
  BOOST_TEST(m.host_bytes == 0);
  // The host store (Note [Host optimizer step]) at stage 2 in bf16: per element of the shard
  // the f32 master weights, both moments and gradient, and the new 16-bit parameters, 18
  // bytes; on the CPU training device they are its memory (optim_bytes), on a GPU host_bytes.
  auto bf16_model = make_model();
  zero::ZeroOptimizer host(bf16_model,
                           {.stage = 2,
                            .dtype = DType::bf16,
                            .offload_optimizer = {.device = zero::OffloadDevice::cpu, .host_store_on_cpu = true}},
                           kAdam, kDecay, world);
  int64_t shards = 0;
  for (const auto& [padded, _] : host.group_sizes()) shards += padded / n;
  BOOST_TEST(host.memory().optim_bytes == 18 * shards);
  BOOST_TEST(host.memory().host_bytes == 0);
  // Parameters in host memory (Note [Offloaded parameters], the backend forced on the CPU) at
  // stage 3 in bf16: every shard's 2 bytes per element in host_bytes, apart from the device
  // copies, of which the device holds at most two buffers of the largest shard; the master
  // weights and moments stay on the device.
  auto param_model = make_model();
  zero::ZeroOptimizer params(param_model,
                             {.stage = 3,
                              .dtype = DType::bf16,
                              .stage3_param_persistence_threshold = 0,
                              .offload_param = {.device = zero::OffloadDevice::cpu,
                                                .buffer_count = 2,
                                                .host_store_on_cpu = true}},
                             kAdam, kDecay, world);
  int64_t param_shards = 0, param_largest = 0;
  for (const auto& [padded, partitioned] : params.group_sizes()) {
    BOOST_TEST(partitioned);
    param_shards += 2 * padded / n;
    param_largest = std::max(param_largest, 2 * padded / n);
  }
  const zero::ResidentBytes pm = params.memory();
  BOOST_TEST(pm.host_bytes == param_shards);
  BOOST_TEST(pm.param_bytes == std::min(param_shards, 2 * param_largest));
  BOOST_TEST(pm.nvme_bytes == 0);
  BOOST_TEST(pm.optim_bytes == 12 * param_shards / 2);  // f32 master weights and both moments
  BOOST_TEST(params.param_swap()->host_bytes() == param_shards);
}

// A frozen partition (zero/frozen_partition.h): each rank holds its shard of every unit
// (4Ψ/n bytes, padding aside), a forward without gradients gathers each unit once (Ψ(n−1)/n
// elements of bus traffic, 4 bytes each) and frees it after, and computes the whole model's
// logits bit for bit; parameters of at most stage3_param_persistence_threshold elements stay
// whole and are never gathered.
BOOST_AUTO_TEST_CASE(a_frozen_partition_forwards_as_the_whole_model) {
  const auto counting = std::make_shared<parallel::CountingCommunicator>(parallel::world());
  const double n = counting->size();
  const Tensor tokens = ops::contiguous(ops::narrow(global_tokens(0), 1, 0, kSeq));
  NoGradGuard no_grad;
  const Tensor expected = (*make_model())(tokens);
  for (int64_t persist : {int64_t(0), int64_t(1000)}) {
    BOOST_TEST_CONTEXT("persistence threshold " << persist) {
      auto model = make_model();
      int64_t psi = 0, kept = 0;
      for (const auto& [_, p] : model->named_parameters()) (p.numel() <= persist ? kept : psi) += p.numel();
      zero::FrozenPartition frozen(model, {.stage = 3, .stage3_param_persistence_threshold = persist}, counting);
      int64_t resident = 0;
      for (const auto& [padded, partitioned] : frozen.group_sizes())
        resident += 4 * (partitioned ? padded / int64_t(n) : padded);
      BOOST_TEST(frozen.resident_bytes() == resident);
      BOOST_TEST(std::abs(double(resident) - 4.0 * (double(psi) / n + double(kept))) <= 4.0 * 8 * n);
      counting->reset();
      BOOST_TEST(test::max_abs_diff((*model)(tokens), expected) == 0.0);
      const double bus = 4.0 * double(psi) * (n - 1.0) / n;
      BOOST_TEST(std::abs(counting->bus_bytes() - bus) <= 4.0 * 8 * n, counting->bus_bytes()
                                                                           << " bus bytes, expected " << bus);
      for (const auto& [name, p] : model->named_parameters())  // freed after the forward, but the kept ones
        BOOST_TEST(bool(p.impl().storage) == (p.numel() <= persist), name);
    }
  }
}

BOOST_AUTO_TEST_CASE(communication_per_step_is_two_psi) {
  // Ring-optimal volume per step (no accumulation): stage 0 all-reduces Ψ, stages 1–2
  // reduce-scatter and all-gather Ψ (bus bytes 2Ψ(n−1)/n x 4 bytes); stage 3 all-gathers Ψ
  // for the forward and again for the backward and reduce-scatters Ψ (3Ψ(n−1)/n x 4).
  const auto counting = std::make_shared<parallel::CountingCommunicator>(parallel::world());
  const double n = counting->size();
  for (int stage : {0, 1, 2, 3}) {
    auto model = make_model();
    zero::ZeroOptimizer opt(model, {.stage = stage, .stage3_param_persistence_threshold = 0}, kAdam, kDecay, counting);
    counting->reset();
    const Tensor tokens = global_tokens(0);
    const int64_t micro = kGlobalBatch / int64_t(n);
    opt.begin_backward(true);
    backward(loss_of(*model, tokens, counting->rank() * micro, micro));
    opt.step(kLr, kClip);
    const double psi = double(model->num_parameters());
    const double expected = (stage == 3 ? 3.0 : 2.0) * psi * 4.0 * (n - 1.0) / n;
    BOOST_TEST(std::abs(counting->bus_bytes() - expected) / expected < 0.05,
               "stage " << stage << ": " << counting->bus_bytes() << " bus bytes, expected " << expected);
    BOOST_TEST(counting->stats().at(stage == 0 ? "all_reduce" : "reduce_scatter").calls > 0);
  }
}

BOOST_AUTO_TEST_CASE(mixed_precision_tracks_fp32) {
  // bf16 and fp16 storage (f32 master weights and moments) follow the fp32 run: every loss
  // within 0.5% relative and every parameter within 2% of the largest parameter value (bf16
  // rounds to 8 bits of mantissa: a relative step of 2^-8 = 0.4%).
  const Trajectory ref = single_process(1);
  double scale = 0;
  for (const auto& [_, p] : ref.params) scale = std::max(scale, ops::max_abs(p));
  for (DType dtype : {DType::bf16, DType::f16}) {
    for (int stage : {0, 2, 3}) {
      BOOST_TEST_CONTEXT(dtype_name(dtype) << ", stage " << stage) {
        const Trajectory t = data_parallel(stage, 1, 0, dtype);
        for (size_t i = 0; i < ref.losses.size(); ++i)
          BOOST_TEST(std::abs(t.losses[i] - ref.losses[i]) / ref.losses[i] < 5e-3, "step " << i);
        for (size_t i = 0; i < ref.params.size(); ++i)
          BOOST_TEST(test::max_abs_diff(t.params[i].second, ref.params[i].second) / scale < 2e-2, ref.params[i].first);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(mixed_precision_memory_and_communication_follow_the_zero_paper) {
  // 16-bit parameters and gradients, K = 12 (f32 master, momentum, variance): per rank
  // (2+2+12)Ψ, 2Ψ+2Ψ+12Ψ/n, 2Ψ+14Ψ/n, 16Ψ/n; bus bytes per step 2Ψ(n−1)/n x 2 bytes
  // (stage 3: 3Ψ).
  const auto counting = std::make_shared<parallel::CountingCommunicator>(parallel::world());
  const double n = counting->size();
  for (int stage : {0, 1, 2, 3}) {
    auto model = make_model();
    const double psi = double(model->num_parameters());
    zero::ZeroOptimizer opt(model, {.stage = stage, .dtype = DType::bf16, .stage3_param_persistence_threshold = 0},
                            kAdam, kDecay, counting);
    const zero::ResidentBytes m = opt.memory();
    const double total = double(m.param_bytes + m.grad_bytes + m.optim_bytes);
    const double expected[4] = {16 * psi, 4 * psi + 12 * psi / n, 2 * psi + 14 * psi / n, 16 * psi / n};
    BOOST_TEST(std::abs(total - expected[stage]) / expected[stage] < 0.05, "stage " << stage << ": " << total);

    counting->reset();
    const int64_t micro = kGlobalBatch / int64_t(n);
    opt.begin_backward(true);
    backward(loss_of(*model, global_tokens(0), counting->rank() * micro, micro));
    opt.step(kLr, kClip);
    const double bus = (stage == 3 ? 3.0 : 2.0) * psi * 2.0 * (n - 1.0) / n;
    BOOST_TEST(std::abs(counting->bus_bytes() - bus) / bus < 0.05, "stage " << stage);
  }
}

BOOST_AUTO_TEST_CASE(fp16_overflow_skips_the_step_and_halves_the_scale) {
  const parallel::CommunicatorPtr world = parallel::world();
  auto model = make_model();
  // 2^30 times the loss overflows f16's 65504 in the gradients at once.
  zero::ZeroOptimizer opt(
      model,
      {.stage = 2, .dtype = DType::f16, .loss_scale = {.dynamic = true, .initial_scale = 0x1p30, .hysteresis = 1}},
      kAdam, kDecay, world);
  std::vector<Tensor> before;
  for (const Tensor& p : model->parameters()) before.push_back(ops::clone(p));
  const int64_t micro = kGlobalBatch / world->size();
  opt.begin_backward(true);
  backward(loss_of(*model, global_tokens(0), world->rank() * micro, micro), Tensor::full({}, opt.loss_scale()));
  const zero::ZeroOptimizer::StepNorm skipped = opt.step(kLr, kClip);
  BOOST_TEST(skipped.skipped());
  BOOST_TEST(!std::isfinite(skipped.norm.item()));
  BOOST_TEST(opt.loss_scale() == 0x1p29);
  const std::vector<Tensor> after = model->parameters();
  for (size_t i = 0; i < after.size(); ++i) BOOST_TEST(test::max_abs_diff(after[i], before[i]) == 0.0);
}

BOOST_AUTO_TEST_CASE(predividing_keeps_f16_sums_over_ranks_finite) {
  // loss = sum(W x) with x all ones: every element of W's gradient is the loss scale,
  // 2^15, on every rank. Summed over n >= 2 ranks it passes f16's 65504 and the step is
  // skipped; divided by n first (prescale_gradients) every partial sum k·2^15/n is exact
  // in f16 (at most 3 significant bits), the sum is 2^15, and the averaged, unscaled
  // gradient exactly 1: the first Adam step moves every weight by lr / (1 + eps), up to
  // the f16 rounding of weights below 1 (2^-11 at most).
  const parallel::CommunicatorPtr world = parallel::world();
  const double n = world->size(), lr = 0.1;
  for (int stage : {0, 1, 2, 3}) {
    for (double predivide : {1.0, n}) {
      BOOST_TEST_CONTEXT("stage " << stage << ", gradient_predivide_factor " << predivide) {
        auto model = std::make_shared<nn::Linear>(4, 3, /*bias=*/false);
        zero::ZeroOptimizer opt(model,
                                {.stage = stage,
                                 .dtype = DType::f16,
                                 .loss_scale = {.static_scale = 0x1p15},
                                 .stage3_param_persistence_threshold = 0,
                                 .gradient_predivide_factor = predivide},
                                kAdam, /*weight_decay=*/0.0, world);
        opt.gather_all();
        const std::vector<float> before = ops::to(model->weight, DType::f32).to_vector<float>();
        opt.release_all();
        opt.begin_backward(true);
        backward(sum((*model)(Tensor::full({1, 4}, 1.0))), Tensor::full({}, opt.loss_scale()));
        const double norm = opt.step(lr, /*max_norm=*/0.0).norm.item();
        if (predivide == 1.0 && n > 1) {
          BOOST_TEST(std::isinf(norm));
          continue;
        }
        BOOST_TEST(norm == std::sqrt(12.0));
        opt.gather_all();
        const std::vector<float> after = ops::to(model->weight, DType::f32).to_vector<float>();
        opt.release_all();
        for (size_t i = 0; i < after.size(); ++i) BOOST_TEST(std::abs(before[i] - after[i] - lr) <= 0x1p-11);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(hysteresis_refills_as_deepspeeds_loss_scaler) {
  // Steps overflow or not by the backward's seed (1e30 overflows f16 at once). With
  // hysteresis 2 the first overflow only uses it up; a later clean step refills it when the
  // scale grows (window 1), or at every clean step with consecutive_hysteresis.
  const parallel::CommunicatorPtr world = parallel::world();
  struct Case {
    int64_t window;
    bool consecutive;
    std::vector<bool> overflows;
    std::vector<double> scales;  // after each step
  };
  for (const Case& c : {Case{1, false, {true, false, true, true}, {1024, 2048, 2048, 1024}},
                        Case{1000, false, {true, false, true, true}, {1024, 1024, 512, 256}},
                        Case{1000, true, {true, false, true, true}, {1024, 1024, 1024, 512}}}) {
    BOOST_TEST_CONTEXT("window " << c.window << ", consecutive_hysteresis " << c.consecutive) {
      auto model = std::make_shared<nn::Linear>(4, 3, /*bias=*/false);
      zero::ZeroOptimizer opt(model,
                              {.stage = 1,
                               .dtype = DType::f16,
                               .loss_scale = {.dynamic = true,
                                              .initial_scale = 1024,
                                              .window = c.window,
                                              .hysteresis = 2,
                                              .consecutive_hysteresis = c.consecutive}},
                              kAdam, 0.0, world);
      for (size_t s = 0; s < c.overflows.size(); ++s) {
        opt.begin_backward(true);
        backward(sum((*model)(Tensor::full({1, 4}, 1.0))), Tensor::full({}, c.overflows[s] ? 1e30 : 1.0));
        const zero::ZeroOptimizer::StepNorm r = opt.step(kLr, 0.0);
        BOOST_TEST(r.skipped() == c.overflows[s]);
        BOOST_TEST(!std::isfinite(r.norm.item()) == c.overflows[s]);
        BOOST_TEST(opt.loss_scale() == c.scales[s], "step " << s);
      }
    }
  }
}

// Note [Loss scale on the device]: fp16 with the scale on the device trains bit for bit as
// with it on the host (forced by a delayed update whose warm-up the run never passes): the
// same parameters, norms, verdicts, rates and scales over 16 steps of 2 micro-batches with
// clipping, at every stage. The first steps overflow (2^18), a window of 3 doubles the scale
// back into overflows, and the schedule's rates and betas count the steps taken.
BOOST_AUTO_TEST_CASE(fp16_loss_scale_on_the_device_trains_as_on_the_host) {
  const parallel::CommunicatorPtr world = parallel::world();
  const zero::ZeroOptimizer::RatesAt rates = [](int64_t t) {
    return zero::ZeroOptimizer::Rates{1e-3 / double(1 + t), std::pair(0.9 - 0.01 * double(t), 0.95)};
  };
  struct Run {
    std::vector<double> outcomes, norms;
    std::vector<Tensor> params;
    zero::ZeroOptimizer::Counters counters;
  };
  for (int stage : {0, 1, 2, 3}) {
    const auto run = [&](bool on_device) {
      auto model = make_model();
      zero::ZeroConfig z{.stage = stage,
                         .dtype = DType::f16,
                         .loss_scale = {.dynamic = true, .initial_scale = 0x1p18, .window = 3, .hysteresis = 1},
                         .stage3_param_persistence_threshold = 0};
      if (!on_device) z.delayed_update = {.enabled = true, .warmup_steps = 1000};
      zero::ZeroOptimizer opt(model, z, kAdam, kDecay, world);
      BOOST_TEST(opt.loss_scale_on_device() == on_device);
      Run r;
      const int64_t rows = kGlobalBatch / (2 * world->size());
      for (int64_t step = 0; step < 16; ++step) {
        for (int64_t m = 0; m < 2; ++m) {
          const Tensor l = loss_of(*model, global_tokens(step), (m * world->size() + world->rank()) * rows, rows);
          opt.begin_backward(m == 1);
          backward(l, ops::reshape(opt.loss_seed(2.0, l.dtype()), l.shape()));
        }
        BOOST_TEST(std::isnan(opt.prepare_step(rates)) == on_device);
        const zero::ZeroOptimizer::StepNorm n = opt.step(kClip);
        for (double v : n.outcome.to_vector<double>()) r.outcomes.push_back(v);
        const double norm = n.norm.item();
        r.norms.push_back(std::isfinite(norm) ? norm : INFINITY);
      }
      r.counters = opt.counters();
      opt.gather_all();
      for (const Tensor& p : model->parameters()) r.params.push_back(ops::clone(p));
      opt.release_all();
      return r;
    };
    const Run device = run(true), host = run(false);
    BOOST_TEST_CONTEXT("stage " << stage) {
      BOOST_TEST(device.outcomes == host.outcomes, boost::test_tools::per_element());
      BOOST_TEST(device.norms == host.norms, boost::test_tools::per_element());
      for (size_t i = 0; i < host.params.size(); ++i)
        BOOST_TEST(test::max_abs_diff(device.params[i], host.params[i]) == 0.0, "parameter " << i);
      BOOST_TEST(device.counters.steps == host.counters.steps);
      BOOST_TEST(device.counters.loss_scale.scale == host.counters.loss_scale.scale);
      BOOST_TEST(device.counters.loss_scale.clean_steps == host.counters.loss_scale.clean_steps);
      int64_t skipped = 0;
      for (size_t s = 0; s < host.outcomes.size(); s += kStepOutcome) skipped += host.outcomes[s + 1] != 0.0;
      BOOST_TEST(skipped >= 2);
      BOOST_TEST(host.counters.steps >= 4);  // steps taken at rates that moved with them
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()  // test_zero_mpi
