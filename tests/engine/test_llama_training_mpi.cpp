// model.arch "llama" through the trainer under mpirun: configs/llama-demo.json (its model
// and optimizer, a shorter sequence and run) reaches the single-process run's losses and
// validation loss within 1e-5 relative at ZeRO stages 0 and 3 over every rank, and with
// tensor parallelism (with and without sequence parallelism, ZeRO 1 and 2) and two pipeline
// stages; the weights it leaves load back as an nn::Llama that generates.
#include <boost/test/unit_test.hpp>

#include "checkpoint/checkpoint.h"
#include "engine/generate.h"
#include "train/trainer.h"
#include "io/token_file.h"
#include "parallel/runtime.h"
#include "support/check.h"
#include "support/files.h"
#include "support/training.h"

BOOST_AUTO_TEST_SUITE(test_llama_training_mpi)

using namespace triad;

namespace {

// Rank 0 writes the token file (and holds the outputs) in its folder; every rank learns
// the folder's path.
std::string shared_folder(const test::TempDir& dir, parallel::Communicator& world) {
  std::string path = dir.file("");
  if (world.rank() == 0) {
    std::vector<uint32_t> tokens;
    for (uint32_t i = 0; i < 12000; ++i) tokens.push_back((i * 11u + (i / 7u) * 5u) % 64u);
    io::write_token_file(dir.file("tokens.bin"), tokens, 64);
  }
  Tensor bytes = Tensor::zeros({512}, DType::i8);
  std::copy(path.begin(), path.end(), bytes.data<int8_t>());
  world.broadcast(bytes, 0)->wait();
  return std::string(reinterpret_cast<const char*>(bytes.data<int8_t>()));
}

// The demo's model and optimizer over 32-token sequences, 4 steps of 16 sequences in 2
// micro-batches per rank.
nlohmann::json demo_config(const std::string& folder, int dp) {
  nlohmann::json j = engine::load_config_file(test::data_path("../../configs/llama-demo.json"));
  j["model"]["seq_len"] = 32;
  j["data"] = {{"corpus", folder + "/tokens.bin"}, {"val_fraction", 0.1}};
  j["steps"] = 4;
  j["scheduler"]["params"]["warmup_num_steps"] = 2;
  j["train_micro_batch_size_per_gpu"] = 16 / (2 * dp);
  j["eval_iters"] = 2;
  j["log_interval"] = 100;
  j.erase("output_dir");
  return j;
}

struct Layout {
  std::string name;
  int tp = 1, pp = 1, zero_stage = 3;
  bool sequence_parallel = false;
};

}  // namespace

BOOST_AUTO_TEST_CASE(llama_layouts_follow_the_single_process_run) {
  const parallel::CommunicatorPtr world = parallel::world();
  const int n = world->size();
  test::TempDir dir;
  const std::string folder = shared_folder(dir, *world);
  nlohmann::json single = demo_config(folder, 1);
  single["output_dir"] = dir.file("single");  // every rank runs it, in its own folder
  const double ref_val = engine::train(engine::parse_config(single), {.metrics_path = dir.file("ref.jsonl")});
  const std::vector<double> ref = test::metric_losses(dir.file("ref.jsonl"));
  BOOST_TEST_REQUIRE(ref.size() == 4u);
  for (const Layout& l : {Layout{"zero0", 1, 1, 0}, Layout{"zero3", 1, 1, 3}, Layout{"tp2", 2, 1, 1},
                          Layout{"tp2 sp", 2, 1, 2, true}, Layout{"pp2", 1, 2, 1}}) {
    BOOST_TEST_CONTEXT(l.name << " on " << n << " ranks") {
      nlohmann::json j = demo_config(folder, n / (l.tp * l.pp));
      j["model"]["tensor_parallel"] = l.tp;
      j["model"]["sequence_parallel"] = l.sequence_parallel;
      j["pipeline"] = {{"stages", l.pp}};
      j["zero_optimization"] = {{"stage", l.zero_stage}, {"stage3_param_persistence_threshold", 0}};
      if (l.name == "zero3") j["output_dir"] = folder + "/zero3";
      const std::string metrics = folder + "/" + l.name + ".jsonl";
      const double val = engine::train(engine::parse_config(j, n), {.metrics_path = metrics}, world);
      BOOST_TEST(std::abs(val - ref_val) / ref_val < 1e-5);
      if (world->rank() == 0) {
        const std::vector<double> losses = test::metric_losses(metrics);
        BOOST_TEST_REQUIRE(losses.size() == ref.size());
        for (size_t i = 0; i < ref.size(); ++i) BOOST_TEST(std::abs(losses[i] - ref[i]) / ref[i] < 1e-5, "step " << i);
      }
    }
  }
  if (world->rank() == 0) {
    // The ZeRO-3 run's weights are the single process's, and load back as a Llama.
    const engine::LoadedModel a = engine::load_model(dir.file("single/model.h5"));
    const engine::LoadedModel b = engine::load_model(folder + "/zero3/model.h5");
    BOOST_TEST_REQUIRE(dynamic_cast<nn::Llama*>(b.model.get()) != nullptr);
    const auto pa = a.model->named_parameters(), pb = b.model->named_parameters();
    BOOST_TEST_REQUIRE(pa.size() == pb.size());
    for (size_t i = 0; i < pa.size(); ++i)
      BOOST_TEST(test::relative_error(pb[i].second, pa[i].second) < 1e-5, pa[i].first);
    const engine::SamplingOptions greedy{.temperature = 0.0, .max_new_tokens = 6};
    BOOST_TEST(engine::generate(*a.model, {1, 12, 23}, greedy) == engine::generate(*b.model, {1, 12, 23}, greedy));
  }
  world->barrier();
}

BOOST_AUTO_TEST_SUITE_END()  // test_llama_training_mpi
