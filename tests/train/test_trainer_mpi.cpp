// The trainer under mpirun: data-parallel runs at ZeRO stages 0–3 follow the
// single-process run (same losses and validation loss), a GPT with MoE blocks too (on
// pipeline stages, with tensor parallelism and with recomputed blocks as well), and ranks that disagree on the
// configuration all stop with the same clear error instead of hanging. Ranks that would
// share a GPU are found, and named alike on every rank (no GPU is touched).
#include <boost/test/unit_test.hpp>
#include <fstream>

#include "checkpoint/checkpoint.h"
#include "config/model_factory.h"
#include "engine/engine.h"
#include "parallel/runtime.h"
#include "support/check.h"
#include "support/files.h"
#include "support/shared_corpus.h"
#include "support/training.h"
#include "train/trainer.h"

BOOST_AUTO_TEST_SUITE(test_trainer_mpi)

using namespace triad;

namespace {

nlohmann::json config_json(const std::string& corpus, int64_t micro) {
  nlohmann::json j = test::small_gpt_config(corpus, 12);
  j["train_micro_batch_size_per_gpu"] = micro;
  j["seed"] = 5;
  return j;
}

}  // namespace

BOOST_AUTO_TEST_CASE(data_parallel_training_follows_the_single_process_run) {
  const parallel::CommunicatorPtr world = parallel::world();
  const int n = world->size();
  test::TempDir dir;
  const std::string corpus = test::shared_corpus(dir, *world) + "/tokens.bin";
  nlohmann::json single = config_json(corpus, 8);  // 16 = 8 x 2 accumulation
  const double ref_val = engine::train(engine::parse_config(single), {.metrics_path = dir.file("ref.jsonl")});
  const std::vector<double> ref = test::metric_losses(dir.file("ref.jsonl"));
  for (int stage : {0, 1, 2, 3}) {
    BOOST_TEST_CONTEXT("stage " << stage) {
      nlohmann::json j = config_json(corpus, 16 / (2 * n));  // 2 accumulation steps, all ranks
      j["zero_optimization"] = {{"stage", stage}, {"stage3_param_persistence_threshold", 0}};
      const std::string metrics = dir.file("dp" + std::to_string(stage) + ".jsonl");
      const double val = engine::train(engine::parse_config(j, n), {.metrics_path = metrics}, world);
      BOOST_TEST(std::abs(val - ref_val) / ref_val < 1e-5);
      if (world->rank() == 0) {  // rank 0 writes the metrics
        const std::vector<double> losses = test::metric_losses(metrics);
        BOOST_TEST_REQUIRE(losses.size() == ref.size());
        for (size_t i = 0; i < ref.size(); ++i) BOOST_TEST(std::abs(losses[i] - ref[i]) / ref[i] < 1e-5, "step " << i);
      }
    }
  }
  world->barrier();  // rank 0's folder outlives every rank's use of it
}

// Note [Host synchronisation in a step]: read at every step or only at the last (log_interval
// 100), the ranks report the same steps: one collective over the read steps gives each its
// loss, activation peak and straggler report.
BOOST_AUTO_TEST_CASE(steps_read_together_report_as_steps_read_one_by_one) {
  const parallel::CommunicatorPtr world = parallel::world();
  const int n = world->size();
  test::TempDir dir;
  const std::string corpus = test::shared_corpus(dir, *world) + "/tokens.bin";
  const auto run = [&](int64_t log_interval) {
    nlohmann::json j = config_json(corpus, 16 / (2 * n));
    j["zero_optimization"] = {{"stage", 1}};
    j["log_interval"] = log_interval;
    const std::string metrics = dir.file("every" + std::to_string(log_interval) + ".jsonl");
    engine::train(engine::parse_config(j, n), {.metrics_path = metrics}, world);
    std::vector<nlohmann::json> lines;
    if (world->rank() != 0) return lines;  // rank 0 writes the metrics
    std::ifstream in(metrics);
    for (std::string line; std::getline(in, line);) {
      nlohmann::json l = nlohmann::json::parse(line);
      BOOST_TEST(l["ranks"]["slowest_ms"].get<double>() >= l["ranks"]["fastest_ms"].get<double>());
      BOOST_TEST(l["ranks"]["slowest_rank"].get<int>() < n);
      for (const char* timing : {"step_ms", "tokens_per_s", "ranks"}) l.erase(timing);
      lines.push_back(std::move(l));
    }
    return lines;
  };
  const std::vector<nlohmann::json> each = run(1), together = run(100);
  if (world->rank() == 0) {
    BOOST_TEST(each.size() == 12u);
    BOOST_TEST(together == each);
  }
  world->barrier();  // rank 0's folder outlives every rank's use of it
}

namespace {

// The "moe" figure `key` of every line of a metrics file.
std::vector<double> moe_metric(const std::string& metrics, const std::string& key) {
  std::vector<double> out;
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line)["moe"][key].get<double>());
  return out;
}

// The figure `key` of every line of a metrics file.
std::vector<double> metric(const std::string& metrics, const std::string& key) {
  std::vector<double> out;
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line)[key].get<double>());
  return out;
}

}  // namespace

// MoE blocks, dropless top-2 (no sampling): each token's output is then independent of the
// other tokens, and a layout's losses equal the single process's given the same
// micro-batches (the router losses are per micro-batch: the reference accumulates the
// ranks' micro-batches; its validation rows differ, micro x ranks, so they are not compared).
// With sequence parallelism each tp rank runs the MoE blocks on the whole sequence gathered
// from the group, the GPT's and the Llama's.
BOOST_AUTO_TEST_CASE(moe_training_follows_the_single_process_run) {
  const parallel::CommunicatorPtr world = parallel::world();
  const int n = world->size();
  test::TempDir dir;
  const std::string corpus = test::shared_corpus(dir, *world) + "/tokens.bin";
  auto moe_config = [&](int dp, bool llama) {
    nlohmann::json j = config_json(corpus, 16 / (2 * dp));
    j["steps"] = 6;
    if (llama) j["model"].update({{"arch", "llama"}, {"n_kv_head", 2}, {"intermediate_size", 24}});
    j["model"]["moe"] = {{"num_experts", 4},        {"every", 1},           {"top_k", 2},
                         {"drop_tokens", false},    {"aux_loss_coeff", 0.1}, {"z_loss_coeff", 0.01},
                         {"top2_2nd_expert_sampling", false}};
    return j;
  };
  struct Layout {
    std::string name;
    int pp = 1, stage = 0;
    bool recompute = false;
    int tp = 1;
    bool sp = false, llama = false;
  };
  for (const Layout& l :
       {Layout{"zero0"}, Layout{"zero3", 1, 3}, Layout{"zero2 recomputed", 1, 2, true}, Layout{"pp2 zero1", 2, 1},
        Layout{"tp2 zero1", 1, 1, false, 2}, Layout{"tp2 sp zero0", 1, 0, false, 2, true},
        Layout{"tp2 sp zero3", 1, 3, false, 2, true}, Layout{"llama tp2 sp zero1", 1, 1, false, 2, true, true}}) {
    BOOST_TEST_CONTEXT(l.name << " on " << n << " ranks") {
      const int dp = n / (l.pp * l.tp);
      const std::string ref_metrics =
          dir.file("moe_ref_dp" + std::to_string(dp) + (l.llama ? "_llama" : "") + ".jsonl");
      engine::train(engine::parse_config(moe_config(dp, l.llama)), {.metrics_path = ref_metrics});
      nlohmann::json j = moe_config(dp, l.llama);
      j["zero_optimization"] = {{"stage", l.stage}, {"stage3_param_persistence_threshold", 0}};
      j["pipeline"] = {{"stages", l.pp}};
      if (l.recompute) j["model"]["activation_checkpointing"] = true;
      j["model"]["tensor_parallel"] = l.tp;
      j["model"]["sequence_parallel"] = l.sp;
      const std::string metrics = dir.file("moe_" + l.name + ".jsonl");
      engine::train(engine::parse_config(j, n), {.metrics_path = metrics}, world);
      if (world->rank() == 0) {
        const std::vector<double> ref = test::metric_losses(ref_metrics), losses = test::metric_losses(metrics);
        const std::vector<double> ref_moe = moe_metric(ref_metrics, "loss"), moe = moe_metric(metrics, "loss");
        BOOST_TEST_REQUIRE(losses.size() == ref.size());
        BOOST_TEST_REQUIRE(moe.size() == ref.size());
        for (size_t i = 0; i < ref.size(); ++i) {
          BOOST_TEST(std::abs(losses[i] - ref[i]) / ref[i] < 1e-5, "step " << i);
          BOOST_TEST(std::abs(moe[i] - ref_moe[i]) / ref_moe[i] < 1e-5, "step " << i);
          BOOST_TEST(moe[i] > 0.0);
        }
        BOOST_TEST(moe_metric(metrics, "dropped_fraction").back() == 0.0);
      }
    }
  }
  world->barrier();
}

// Expert parallelism (ep 2: each rank of an ep pair holds half of every MoE layer's experts,
// the experts' gradients reduced over the expert-data-parallel group) follows the single
// process as ep 1 does: the GPT at ZeRO 0, 2 and 3, on two pipeline stages, with tensor
// parallelism, and the Llama. With ZeRO++ (Note [ZeRO with experts]): hpZ alone is exact
// (within 1e-5); qwZ + hpZ + qgZ quantize, so their losses stay within 2% (as
// test_zeropp_mpi bounds them without experts).
// Gradient clipping engages: the norm, which must count every expert once, scales the steps.
BOOST_AUTO_TEST_CASE(expert_parallel_training_follows_the_single_process_run) {
  const parallel::CommunicatorPtr world = parallel::world();
  const int n = world->size();
  test::TempDir dir;
  const std::string corpus = test::shared_corpus(dir, *world) + "/tokens.bin";
  auto moe_config = [&](int dp, bool llama) {
    nlohmann::json j = config_json(corpus, 16 / (2 * dp));
    j["steps"] = 4;
    j["gradient_clipping"] = 0.5;
    if (llama) j["model"].update({{"arch", "llama"}, {"n_kv_head", 1}, {"intermediate_size", 24}});
    j["model"]["moe"] = {{"num_experts", 4},        {"every", 1},           {"top_k", 2},
                         {"drop_tokens", false},    {"aux_loss_coeff", 0.1}, {"z_loss_coeff", 0.01},
                         {"top2_2nd_expert_sampling", false}};
    return j;
  };
  struct Layout {
    std::string name;
    int stage = 0, pp = 1;
    bool llama = false;
    int tp = 1;
    enum { none, hpz, all } zeropp = none;
  };
  for (const Layout& l : {Layout{"ep2 zero0"}, Layout{"ep2 zero2", 2}, Layout{"ep2 zero3", 3},
                          Layout{"ep2 pp2 zero1", 1, 2}, Layout{"llama ep2 zero2", 2, 1, true},
                          Layout{"ep2 tp2 zero1", 1, 1, false, 2}, Layout{"ep2 zero3 hpz2", 3, 1, false, 1, Layout::hpz},
                          Layout{"ep2 zero3 qwz hpz2 qgz", 3, 1, false, 1, Layout::all}}) {
    const int dp = n / (l.pp * l.tp);
    if (dp % 2 != 0) continue;  // pp 2 or tp 2 on 2 ranks leaves one data-parallel rank
    BOOST_TEST_CONTEXT(l.name << " on " << n << " ranks") {
      const std::string ref_metrics = dir.file("ep_ref_" + l.name + ".jsonl");
      engine::train(engine::parse_config(moe_config(dp, l.llama)), {.metrics_path = ref_metrics});
      nlohmann::json j = moe_config(dp, l.llama);
      j["model"]["moe"]["expert_parallel_size"] = 2;
      j["zero_optimization"] = {{"stage", l.stage}, {"stage3_param_persistence_threshold", 0}};
      if (l.zeropp != Layout::none) j["zero_optimization"]["zero_hpz_partition_size"] = 2;
      if (l.zeropp == Layout::all)
        j["zero_optimization"].update({{"zero_quantized_weights", true}, {"zero_quantized_gradients", true}});
      j["pipeline"] = {{"stages", l.pp}};
      j["model"]["tensor_parallel"] = l.tp;
      const std::string metrics = dir.file("ep_" + l.name + ".jsonl");
      engine::train(engine::parse_config(j, n), {.metrics_path = metrics}, world);
      if (world->rank() == 0) {
        const std::vector<double> ref = test::metric_losses(ref_metrics), losses = test::metric_losses(metrics);
        const std::vector<double> ref_moe = moe_metric(ref_metrics, "loss"), moe = moe_metric(metrics, "loss");
        BOOST_TEST_REQUIRE(losses.size() == ref.size());
        BOOST_TEST_REQUIRE(moe.size() == ref.size());
        const std::vector<double> ref_norm = metric(ref_metrics, "grad_norm"), norm = metric(metrics, "grad_norm");
        const double bound = l.zeropp == Layout::all ? 0.02 : 1e-5;
        for (size_t i = 0; i < ref.size(); ++i) {
          BOOST_TEST(std::abs(losses[i] - ref[i]) / ref[i] < bound, "step " << i);
          BOOST_TEST(std::abs(moe[i] - ref_moe[i]) / ref_moe[i] < bound, "step " << i);
          if (l.zeropp != Layout::all) BOOST_TEST(std::abs(norm[i] - ref_norm[i]) / ref_norm[i] < 1e-5, "step " << i);
        }
        BOOST_TEST(ref_norm.front() > 0.5);  // clipped: the norm scales the step
      }
    }
  }
  world->barrier();
}

// A layout where one rank's experts receive no tokens at all: the run starts from weights
// whose MoE blocks send every token to experts 0 and 1, rank 0's of an ep pair (ln2 makes
// feature 0 of the gate's input 8 for every token; the gate rows weigh it +2 for experts 0
// and 1, -2 for 2 and 3). At ep 2 the exchanges to and from rank 1's experts carry no token
// in any step; the run does not hang and follows the single process, and the load metrics
// show experts 2 and 3 idle.
BOOST_AUTO_TEST_CASE(ranks_whose_experts_get_no_tokens_train_with_the_others) {
  const parallel::CommunicatorPtr world = parallel::world();
  const int n = world->size();
  test::TempDir dir;
  const std::string shared = test::shared_corpus(dir, *world), corpus = shared + "/tokens.bin";
  auto moe_config = [&](int dp) {
    nlohmann::json j = config_json(corpus, 16 / (2 * dp));
    j["steps"] = 4;
    j["model"]["moe"] = {{"num_experts", 4},
                         {"every", 1},
                         {"top_k", 2},
                         {"drop_tokens", false},
                         {"aux_loss_coeff", 0.1},
                         {"z_loss_coeff", 0.01},
                         {"top2_2nd_expert_sampling", false}};
    return j;
  };
  const std::string init = shared + "/forced.h5";
  if (world->rank() == 0) {
    const std::shared_ptr<nn::LanguageModel> model = engine::build_model(engine::parse_config(moe_config(n)));
    io::NamedTensors weights;
    for (const auto& [name, p] : model->named_parameters()) {
      Tensor t = ops::clone(p);
      float* v = t.data<float>();
      if (name.ends_with(".ln2.weight")) v[0] = 0;
      if (name.ends_with(".ln2.bias")) v[0] = 8;
      if (name.ends_with(".moe.gate.wg.weight"))
        for (int64_t e = 0; e < 4; ++e) v[e * t.size(1)] = e < 2 ? 2.0f : -2.0f;
      weights.emplace_back(name, t);
    }
    engine::save_initial_checkpoint(init, moe_config(n), weights);
  }
  world->barrier();
  const std::string ref_metrics = dir.file("forced_ref.jsonl"), metrics = dir.file("forced_ep2.jsonl");
  engine::train(engine::parse_config(moe_config(n)), {.metrics_path = ref_metrics, .init = init});
  nlohmann::json j = moe_config(n);
  j["model"]["moe"]["expert_parallel_size"] = 2;
  j["zero_optimization"] = {{"stage", 2}};
  engine::train(engine::parse_config(j, n), {.metrics_path = metrics, .init = init}, world);
  if (world->rank() == 0) {
    const std::vector<double> ref = test::metric_losses(ref_metrics), losses = test::metric_losses(metrics);
    const std::vector<double> ref_moe = moe_metric(ref_metrics, "loss"), moe = moe_metric(metrics, "loss");
    BOOST_TEST_REQUIRE(losses.size() == 4u);
    BOOST_TEST_REQUIRE(losses.size() == ref.size());
    for (size_t i = 0; i < ref.size(); ++i) {
      BOOST_TEST(std::abs(losses[i] - ref[i]) / ref[i] < 1e-5, "step " << i);
      BOOST_TEST(std::abs(moe[i] - ref_moe[i]) / ref_moe[i] < 1e-5, "step " << i);
    }
    std::ifstream in(metrics);
    int lines = 0;
    for (std::string line; std::getline(in, line); ++lines)
      for (const nlohmann::json& layer : nlohmann::json::parse(line)["moe"]["layers"]) {
        const std::vector<double> load = layer["load"].get<std::vector<double>>();
        BOOST_TEST(load[0] + load[1] == 1.0);
        BOOST_TEST(load[2] == 0.0);
        BOOST_TEST(load[3] == 0.0);
      }
    BOOST_TEST(lines == 4);
  }
  world->barrier();
}

BOOST_AUTO_TEST_CASE(ranks_with_different_configs_all_stop) {
  const parallel::CommunicatorPtr world = parallel::world();
  test::TempDir dir;
  nlohmann::json j = config_json(test::shared_corpus(dir, *world) + "/tokens.bin", 16 / world->size());
  j["seed"] = 5 + world->rank();  // every rank a different seed
  const engine::TrainConfig c = engine::parse_config(j, world->size());
  test::check_error([&] { engine::train(c, {}, world); }, {"configuration differs between ranks"});
  world->barrier();
}

BOOST_AUTO_TEST_CASE(ranks_sharing_a_gpu_are_named_on_every_rank) {
  const parallel::CommunicatorPtr world = parallel::world();
  const int n = world->size(), r = world->rank();
  BOOST_TEST(engine::shared_gpu(world.get(), Device::cuda(r)) == "");
  BOOST_TEST(engine::shared_gpu(world.get(), Device::cpu()) == "");
  // The last two ranks on one GPU, the others each on their own.
  const std::string shared = engine::shared_gpu(world.get(), Device::cuda(std::min(r, n - 2)));
  BOOST_TEST(shared == "ranks " + std::to_string(n - 2) + " and " + std::to_string(n - 1) + " both train on cuda:" +
                           std::to_string(n - 2) + " of one node");
}

BOOST_AUTO_TEST_SUITE_END()  // test_trainer_mpi
