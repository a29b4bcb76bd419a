// The actor's EMA (rlhf/actor_ema.h, Note [Actor EMA]), kept as ZeRO shards: after two
// optimizer steps it is β²·θ0 + β(1 − β)·θ1 + (1 − β)·θ2 of the weights each step left, on
// one process at ZeRO-0 and on every rank at ZeRO-3; its checkpoint reads back exactly, the
// averages of removed checkpoints go, and a missing one is an error naming the file.
#include <boost/test/unit_test.hpp>

#include <filesystem>
#include <fstream>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_dir.h"
#include "engine/engine.h"
#include "parallel/runtime.h"
#include "rlhf/actor_ema.h"
#include "support/check.h"
#include "support/files.h"
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
    ema.update();
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
        ema.update();
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

BOOST_AUTO_TEST_SUITE_END()  // test_actor_ema_mpi
