// ZeRO++ (Note [ZeRO++]) composes with the other parallelisms: its groups are made inside
// each data-parallel group. Under tensor parallelism (tp 2 x dp n/2) and inside pipeline
// stages (pp 2 x dp n/2), on ranks emulating nodes that each hold half of every
// data-parallel group: hpZ alone follows plain ZeRO-3 on the same grid within 1e-5 (it only
// changes where the backward's gathers read from), and qwZ + hpZ + qgZ follow it with every
// loss within 2%. At n = 2 no data parallelism is left beside tp or pp, so it runs on 4 and
// 8 ranks (tests/CMakeLists.txt).
#include <boost/test/unit_test.hpp>
#include <cmath>

#include "train/trainer.h"
#include "parallel/runtime.h"
#include "support/files.h"
#include "support/shared_corpus.h"
#include "support/training.h"

BOOST_AUTO_TEST_SUITE(test_zeropp_grids_mpi)

using namespace triad;

namespace {

struct Grid {
  const char* name;
  int tp, pp;
};

// Ten steps of the small GPT at ZeRO-3 on `grid`, two micro-batches per step, every group
// partitioned; nodes hold half of each data-parallel group (Note [Rank layout]: tp varies
// fastest, pp slowest), and hpZ, when on, partitions over a node.
nlohmann::json grid_config(const std::string& folder, const Grid& g, bool hpz, bool quantized) {
  const int n = parallel::world()->size(), dp = n / (g.tp * g.pp);
  nlohmann::json j = test::small_gpt_config(folder + "/tokens.bin", 10);
  j["model"]["tensor_parallel"] = g.tp;
  j["pipeline"] = {{"stages", g.pp}};
  j["train_micro_batch_size_per_gpu"] = 16 / (2 * dp);
  j["seed"] = 3;
  j["cluster"] = {{"ranks_per_node", g.tp * dp / 2}};
  j["zero_optimization"] = {{"stage", 3},
                            {"stage3_param_persistence_threshold", 0},
                            {"zero_hpz_partition_size", hpz ? dp / 2 : 1},
                            {"zero_quantized_weights", quantized},
                            {"zero_quantized_gradients", quantized},
                            {"zeropp_quantization_block", 64},
                            {"zeropp_gradient_quantization_block", 64}};
  return j;
}

std::vector<double> losses(const nlohmann::json& j, const std::string& metrics) {
  const parallel::CommunicatorPtr world = parallel::world();
  engine::train(engine::parse_config(j, world->size()), {.metrics_path = metrics}, world);
  world->barrier();
  return test::metric_losses(metrics);
}

}  // namespace

BOOST_AUTO_TEST_CASE(zeropp_follows_zero3_under_tensor_and_pipeline_parallelism) {
  const parallel::CommunicatorPtr world = parallel::world();
  BOOST_TEST_REQUIRE(world->size() >= 4, "the grids need 4 or 8 ranks, got " << world->size());
  test::TempDir dir;
  const std::string folder = test::shared_corpus(dir, *world);
  for (const Grid& g : {Grid{"tp 2 x dp n/2", 2, 1}, Grid{"pp 2 x dp n/2", 1, 2}}) {
    BOOST_TEST_CONTEXT(g.name) {
      const std::string tag = folder + "/" + std::to_string(g.tp) + std::to_string(g.pp);
      const std::vector<double> zero3 = losses(grid_config(folder, g, false, false), tag + "zero3.jsonl");
      const std::vector<double> hpz = losses(grid_config(folder, g, true, false), tag + "hpz.jsonl");
      const std::vector<double> every = losses(grid_config(folder, g, true, true), tag + "all.jsonl");
      BOOST_TEST_REQUIRE(zero3.size() == 10u);
      BOOST_TEST_REQUIRE(hpz.size() == 10u);
      BOOST_TEST_REQUIRE(every.size() == 10u);
      for (size_t i = 0; i < zero3.size(); ++i) {
        BOOST_TEST(std::abs(hpz[i] - zero3[i]) <= 1e-5 * zero3[i], "hpZ, step " << i + 1);
        BOOST_TEST(std::abs(every[i] - zero3[i]) <= 0.02 * zero3[i], "qwZ + hpZ + qgZ, step " << i + 1);
      }
    }
  }
  world->barrier();  // rank 0's folder outlives every rank's reading of it
}

BOOST_AUTO_TEST_SUITE_END()  // test_zeropp_grids_mpi
