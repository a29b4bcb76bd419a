// The actor's EMA (rlhf/actor_ema.h, Note [Actor EMA]), kept as ZeRO shards: after two
// optimizer steps it is β²·θ0 + β(1 − β)·θ1 + (1 − β)·θ2 of the weights each step left, on
// one process at ZeRO-0 and on every rank at ZeRO-3; its checkpoint reads back exactly, the
// averages of removed checkpoints go, and a missing one is an error naming the file. With
// offload it lives in host memory or (NVMe) in a swap file, and is the same average.
#include <boost/test/unit_test.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_dir.h"
#include "engine/engine.h"
#include "io/h5file.h"
#include "io/swap_file.h"
#include "parallel/runtime.h"
#include "rlhf/actor_ema.h"
#include "rlhf/ema_swap_storage.h"
#include "support/check.h"
#include "support/files.h"
#include "support/same_datasets.h"
#include "support/shared_corpus.h"
#include "tensor/random.h"

BOOST_AUTO_TEST_SUITE(test_actor_ema_mpi)

using namespace triad;

namespace {

constexpr double kBeta = 0.75;

engine::TrainConfig config(const std::string& dir, int ranks) {
  const nlohmann::json j = {
      {"model", {{"n_layer", 1}, {"n_head", 2}, {"d_model", 16}, {"seq_len", 8}, {"vocab_size", 32}}},
      {"train_batch_size", 2 * ranks},
      {"train_micro_batch_size_per_gpu", 2},
      {"steps", 2},
      {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 3e-2}}}}},
      {"zero_optimization", {{"stage", ranks > 1 ? 3 : 0}, {"stage3_param_persistence_threshold", 0}}},
      {"checkpoint", {{"dir", dir + "/ckpt"}}}};
  return engine::parse_config(j, ranks);
}

// One optimizer step on random tokens (rank r's own).
void train_step(engine::Engine& e, int rank, int64_t step) {
  Generator g(uint64_t(100 * step + rank));
  Tensor t = Tensor::empty({2, 9});
  ops::uniform_(t, 0.0, 31.999, g);
  const std::vector<float> raw = t.to_vector<float>();
  const Tensor ids = Tensor::from_vector(std::vector<int64_t>(raw.begin(), raw.end()), {2, 9});
  e.backward(e.forward(ops::contiguous(ops::narrow(ids, 1, 0, 8)), ops::contiguous(ops::narrow(ids, 1, 1, 8))));
  e.step();
}

io::NamedTensors weights(const std::string& path) { return engine::read_weights(path).weights; }

// Whether weights files a and b hold the same datasets, bit for bit, with the same checksums.
void same_datasets(const std::string& a, const std::string& b) {
  BOOST_TEST_REQUIRE(engine::read_summary(a).kind == "weights");
  test::check_same_datasets(a, b);
}

// This process's EMA swap files in `folder` (triad-ema-rank<R>-<k>.swp).
std::vector<std::string> ema_swap_files(const std::string& folder) {
  const std::string prefix = "triad-ema-rank" + std::to_string(parallel::world_rank()) + "-";
  std::vector<std::string> out;
  for (const auto& entry : std::filesystem::directory_iterator(folder))
    if (entry.path().filename().string().rfind(prefix, 0) == 0) out.push_back(entry.path().string());
  return out;
}

void flip_first_byte(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDWR);
  BOOST_REQUIRE(fd >= 0);
  unsigned char byte = 0;
  BOOST_REQUIRE(::pread(fd, &byte, 1, 0) == 1);
  byte ^= 0x40;
  BOOST_REQUIRE(::pwrite(fd, &byte, 1, 0) == 1);
  BOOST_REQUIRE(::close(fd) == 0);
}

}  // namespace

BOOST_AUTO_TEST_CASE(average_follows_its_closed_form_and_reads_back) {
  const parallel::CommunicatorPtr world = parallel::world();
  test::TempDir own;
  const std::string dir = test::shared_folder(own, *world);
  if (world->rank() == 0) std::filesystem::create_directories(dir + "/ckpt");
  world->barrier();
  const engine::TrainConfig c = config(dir, world->size());
  engine::Engine e(c, engine::process_grid(c, world));
  rlhf::ActorEma ema(e, kBeta);
  engine::save_weights(dir + "/w0.h5", e, *world, DType::f32);
  for (int64_t s = 1; s <= 2; ++s) {
    train_step(e, world->rank(), s);
    ema.update(*world);
    engine::save_weights(dir + "/w" + std::to_string(s) + ".h5", e, *world, DType::f32);
  }
  ema.save(dir + "/ema.h5", *world);
  // Beside the actor's checkpoint at step 2; the average of a checkpoint that is gone goes.
  engine::save_to_dir(dir + "/ckpt", 0, e, *world);
  if (world->rank() == 0) std::ofstream(dir + "/ckpt/ema-step-00000001.h5") << "stale";
  world->barrier();
  ema.save_checkpoint(2, *world);
  if (world->rank() == 0) BOOST_TEST(!std::filesystem::exists(dir + "/ckpt/ema-step-00000001.h5"));  // rank 0 prunes
  rlhf::ActorEma again(e, kBeta);  // starts from θ2; the checkpoint replaces that
  again.load_checkpoint(2, *world);
  again.save(dir + "/ema-again.h5", *world);
  test::check_error([&] { again.load_checkpoint(5, *world); }, {"ema-step-00000005.h5"});
  world->barrier();

  if (world->rank() == 0) {
    const io::NamedTensors w0 = weights(dir + "/w0.h5"), w1 = weights(dir + "/w1.h5"), w2 = weights(dir + "/w2.h5");
    const io::NamedTensors got = weights(dir + "/ema.h5"), reread = weights(dir + "/ema-again.h5");
    BOOST_REQUIRE_EQUAL(got.size(), w0.size());
    double moved = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      BOOST_TEST_CONTEXT(got[i].first) {
        const Tensor want = ops::add(ops::add(ops::mul(w0[i].second, kBeta * kBeta),
                                              ops::mul(w1[i].second, kBeta * (1 - kBeta))),
                                     ops::mul(w2[i].second, 1 - kBeta));
        BOOST_TEST(test::max_abs_diff(got[i].second, want) < 1e-6);
        BOOST_TEST(test::max_abs_diff(reread[i].second, got[i].second) == 0.0);
        moved = std::max(moved, test::max_abs_diff(w2[i].second, w0[i].second));
      }
    }
    BOOST_TEST(moved > 1e-3);  // the steps moved the weights: the average is not trivially θ0
  }
  world->barrier();
}

// With the parameters and the optimizer's state offloaded to host memory (ZeRO-3, both
// offloads, run on the CPU through the internal switches), the average is kept in host
// memory and is the average of the run without offload, bit for bit, on f32 and bf16 actors.
BOOST_AUTO_TEST_CASE(average_with_offload_is_the_average_without_it) {
  const parallel::CommunicatorPtr world = parallel::world();
  test::TempDir own;
  const std::string dir = test::shared_folder(own, *world);
  for (bool bf16 : {false, true}) {
    std::string files[2];
    for (bool offloaded : {false, true}) {
      engine::TrainConfig c = config(dir, world->size());
      c.zero.stage = 3;
      if (bf16) c.precision.dtype = DType::bf16;
      if (offloaded) {
        c.zero.offload_param = {.device = zero::OffloadDevice::cpu, .host_store_on_cpu = true};
        c.zero.offload_optimizer = {.device = zero::OffloadDevice::cpu, .host_store_on_cpu = true};
      }
      engine::Engine e(c, engine::process_grid(c, world));
      BOOST_TEST((e.zero()->param_swap() != nullptr) == offloaded);
      rlhf::ActorEma ema(e, kBeta);
      for (int64_t s = 1; s <= 2; ++s) {
        train_step(e, world->rank(), s);
        ema.update(*world);
      }
      files[offloaded] = dir + "/ema-" + std::to_string(bf16) + std::to_string(offloaded) + ".h5";
      ema.save(files[offloaded], *world);
    }
    world->barrier();
    if (world->rank() == 0) {
      const io::NamedTensors plain = weights(files[0]), offloaded = weights(files[1]);
      BOOST_REQUIRE_EQUAL(plain.size(), offloaded.size());
      for (size_t i = 0; i < plain.size(); ++i)
        BOOST_TEST(test::max_abs_diff(offloaded[i].second, plain[i].second) == 0.0, plain[i].first << (bf16 ? " bf16" : " f32"));
    }
    world->barrier();
  }
}

// ZeRO-Infinity: with the optimizer's state (f32, bf16) or the parameters in NVMe swap files,
// the average lives in a swap file of its own under the same nvme_path, a view batch at a
// time (several here: sub-groups of 500 elements), counted as NVMe bytes alone. After three
// steps it saves actor_ema.h5 and ema-step-3.h5 bit for bit as the run with the average in
// memory does, and after a fourth; resumed at step 3 it reads ema-step-3.h5 back and goes on
// to the same fourth average. A byte changed in the last rank's file makes the update fail
// on every rank, naming the file (and, on the others, that rank); that file cut short makes
// a save fail on every rank, naming it; every rank's cut short makes the update fail on
// every rank naming the first's; the file goes with the average. On all ranks and on one.
BOOST_AUTO_TEST_CASE(average_in_a_swap_file_is_the_average_in_memory) {
  const parallel::CommunicatorPtr world = parallel::world();
  const int r = world->rank();
  test::TempDir own;
  const std::string dir = test::shared_folder(own, *world);
  const parallel::CommunicatorPtr alone = world->split(r == 0 ? 0 : 1, r);
  struct Variant {
    const char* name;
    bool params, bf16;  // the parameters offloaded (else the optimizer's state); the training dtype
  };
  for (const bool everyone : {true, false})
    for (const Variant v : {Variant{"optimizer_f32", false, false}, Variant{"optimizer_bf16", false, true},
                            Variant{"params_f32", true, false}}) {
      if (!everyone && r != 0) continue;
      const parallel::CommunicatorPtr ranks = everyone ? world : alone;
      const int n = ranks->size(), rank = ranks->rank();
      const std::string tag = std::string(v.name) + (everyone ? "_all" : "_one"), run = dir + "/" + tag;
      const std::string nvme = run + "/nvme";
      BOOST_TEST_CONTEXT(tag) {
        if (rank == 0) {
          std::filesystem::create_directories(nvme);
          for (const char* side : {"/plain/ckpt", "/swapped/ckpt"}) std::filesystem::create_directories(run + side);
        }
        ranks->barrier();
        const auto config_of = [&](const std::string& side, bool swapped) {
          engine::TrainConfig c = config(run + side, n);
          c.zero.stage = 3;
          c.zero.sub_group_size = 500;
          if (v.bf16) c.precision.dtype = DType::bf16;
          if (swapped && v.params)
            c.zero.offload_param = {.device = zero::OffloadDevice::nvme, .nvme_path = nvme, .buffer_count = 2};
          if (swapped && !v.params)
            c.zero.offload_optimizer = {.device = zero::OffloadDevice::nvme, .nvme_path = nvme, .buffer_count = 2};
          return c;
        };
        // Each run: three steps, the average saved and checkpointed, a fourth step.
        for (const bool swapped : {false, true}) {
          const std::string side = swapped ? "/swapped" : "/plain";
          const engine::TrainConfig c = config_of(side, swapped);
          engine::Engine e(c, engine::process_grid(c, ranks));
          rlhf::ActorEma ema(e, kBeta);
          const std::vector<zero::ZeroOptimizer::ViewBatch> batches = e.zero()->view_batches();
          int64_t owned = 0, records = 0;
          for (const zero::ZeroOptimizer::ViewBatch& b : batches) {
            int64_t elements = 0;
            for (const auto& s : e.zero()->state_view(zero::ZeroOptimizer::State::master, b).owned_slices())
              elements += s.values.numel();
            owned += elements;
            records += io::align_up(4 * elements);
          }
          const zero::ResidentBytes m = ema.memory();
          if (swapped) {
            BOOST_TEST(batches.size() > 1u);
            BOOST_TEST(m.nvme_bytes == records);
            BOOST_TEST(m.host_bytes == 0);
            BOOST_TEST(m.param_bytes == 0);
            const std::vector<std::string> files = ema_swap_files(nvme);
            BOOST_TEST_REQUIRE(files.size() == 1u);
            BOOST_TEST(int64_t(std::filesystem::file_size(files[0])) == records);
          } else {
            BOOST_TEST(m.param_bytes == 4 * owned);
            BOOST_TEST(m.host_bytes + m.nvme_bytes == 0);
          }
          for (int64_t s = 1; s <= 3; ++s) {
            train_step(e, rank, s);
            ema.update(*ranks);
          }
          ema.save(run + side + "/actor_ema.h5", *ranks);
          engine::save_to_dir(c.checkpoint.dir, 0, e, *ranks);
          ema.save_checkpoint(3, *ranks);
          train_step(e, rank, 4);
          ema.update(*ranks);
          ema.save(run + side + "/ema-4.h5", *ranks);
        }
        BOOST_TEST(ema_swap_files(nvme).empty());  // gone with the average
        // Resumed from the swapped run's checkpoint at step 3.
        const engine::TrainConfig c = config_of("/swapped", true);
        engine::Engine e(c, engine::process_grid(c, ranks));
        engine::load_checkpoint(c.checkpoint.dir + "/" + engine::checkpoint_file_name(3), e, *ranks);
        std::optional<rlhf::ActorEma> ema(std::in_place, e, kBeta);
        ema->load_checkpoint(3, *ranks);
        ema->save(run + "/resumed-3.h5", *ranks);
        train_step(e, rank, 4);
        ema->update(*ranks);
        ema->save(run + "/resumed-4.h5", *ranks);
        ranks->barrier();
        if (rank == 0) {
          same_datasets(run + "/plain/actor_ema.h5", run + "/swapped/actor_ema.h5");
          same_datasets(run + "/plain/ckpt/ema-step-00000003.h5", run + "/swapped/ckpt/ema-step-00000003.h5");
          same_datasets(run + "/plain/actor_ema.h5", run + "/plain/ckpt/ema-step-00000003.h5");
          same_datasets(run + "/plain/ema-4.h5", run + "/swapped/ema-4.h5");
          same_datasets(run + "/plain/actor_ema.h5", run + "/resumed-3.h5");
          same_datasets(run + "/plain/ema-4.h5", run + "/resumed-4.h5");
          // The fourth step moved the average: the comparison is not of two equal files.
          const io::NamedTensors third = weights(run + "/plain/actor_ema.h5"),
                                 fourth = weights(run + "/plain/ema-4.h5");
          double moved = 0;
          for (size_t i = 0; i < third.size(); ++i)
            moved = std::max(moved, test::max_abs_diff(third[i].second, fourth[i].second));
          BOOST_TEST(moved > 1e-4);
        }
        ranks->barrier();

        // Damage. A changed byte in the last rank's file: the update fails on every rank, that
        // rank naming the file and what differs, the others the file and that rank.
        const std::vector<std::string> files = ema_swap_files(nvme);
        BOOST_TEST_REQUIRE(files.size() == 1u);
        const std::string path = files[0];
        const int last = everyone ? world->size() - 1 : 0;  // the world rank its file is named for
        const std::string differs = "': the average of batch 0 read back differs from what was written (CRC-32C ";
        if (rank == n - 1) flip_first_byte(path);
        const std::string flipped = test::error_message([&] { ema->update(*ranks); });
        if (rank == n - 1) {
          BOOST_TEST(flipped.find("swap file '" + path + differs) == 0u, flipped);
          BOOST_TEST(flipped.find("(rank ") == std::string::npos, flipped);
        } else {
          BOOST_TEST(flipped.find("triad-ema-rank" + std::to_string(last) + "-") != std::string::npos, flipped);
          BOOST_TEST(flipped.find(differs) != std::string::npos, flipped);
          BOOST_TEST(flipped.find(" (rank " + std::to_string(n - 1) + ")") != std::string::npos, flipped);
        }
        if (rank == n - 1) flip_first_byte(path);  // back as it was
        ranks->barrier();
        // The last rank's file cut short: a save fails on every rank, naming that file.
        if (rank == n - 1) BOOST_TEST_REQUIRE(::truncate(path.c_str(), 0) == 0);
        ranks->barrier();
        const std::string saved = test::error_message([&] { ema->save(run + "/damaged.h5", *ranks); });
        BOOST_TEST(saved.find("triad-ema-rank" + std::to_string(last) + "-") != std::string::npos, saved);
        BOOST_TEST((saved.find("short read") != std::string::npos), saved);
        BOOST_TEST((rank != n - 1 || saved.find("swap file '" + path + "'") != std::string::npos), saved);
        BOOST_TEST(!std::filesystem::exists(run + "/damaged.h5"));
        // Every rank's cut short: the update fails on every rank, naming the first rank's file
        // (world rank 0's), the others that rank too.
        BOOST_TEST_REQUIRE(::truncate(path.c_str(), 0) == 0);
        const std::string updated = test::error_message([&] { ema->update(*ranks); });
        BOOST_TEST(updated.find("': read of ") != std::string::npos, updated);
        BOOST_TEST(updated.find("the file is shorter than it was written") != std::string::npos, updated);
        BOOST_TEST(updated.find("triad-ema-rank0-") != std::string::npos, updated);
        BOOST_TEST((rank == 0 ? updated.find("swap file '" + path + "': read of ") == 0u
                              : updated.find(" (rank 0)") != std::string::npos),
                   updated);
        ema.reset();
        BOOST_TEST(ema_swap_files(nvme).empty());
        ranks->barrier();
      }
    }
  world->barrier();
}

// The swap file writes a batch back on a thread (Note [Actor EMA]): a read of that batch
// right after its write, the read ahead of it, and a read after finish() see what was
// written, never the record before; records of 4 MiB, so that a write is still in flight
// when the read comes. Each rank on its own file.
BOOST_AUTO_TEST_CASE(a_batch_read_after_its_write_behind_reads_what_was_written) {
  test::TempDir dir;
  rlhf::EmaSwapStorage storage("zero_optimization.offload_optimizer.nvme_path", dir.path().string(), io::AioConfig{});
  const int64_t n = int64_t(1) << 20;
  for (int k = 0; k < 2; ++k)
    storage.add({{"w" + std::to_string(k), {n}, 0, Tensor::full({n}, double(k))}});
  auto all_equal = [&](const std::vector<rlhf::EmaStorage::Slice>& batch, double want) {
    const std::vector<float> v = batch.at(0).values.to_vector<float>();
    return std::all_of(v.begin(), v.end(), [&](float x) { return x == float(want); });
  };
  for (int round = 1; round <= 3; ++round) {
    std::vector<rlhf::EmaStorage::Slice> b0 = storage.read(0);
    ops::fill_(b0[0].values, 10.0 * round);
    storage.write(0, b0);
    BOOST_TEST(all_equal(storage.read(0), 10.0 * round), "round " << round << ": batch 0 read after its write");
    std::vector<rlhf::EmaStorage::Slice> b1 = storage.read(1);
    ops::fill_(b1[0].values, 10.0 * round + 1);
    storage.write(1, b1);
    storage.prefetch(1);
    BOOST_TEST(all_equal(storage.read(1), 10.0 * round + 1), "round " << round << ": batch 1 read ahead");
    storage.write(0, storage.read(0));
    storage.finish();
    BOOST_TEST(all_equal(storage.read(0), 10.0 * round), "round " << round << ": batch 0 after finish");
  }
}

BOOST_AUTO_TEST_SUITE_END()  // test_actor_ema_mpi
