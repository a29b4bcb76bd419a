// Resharded resume: a checkpoint written by all ranks at ZeRO stage 3 is resumed by half the
// ranks at ZeRO stage 1 and by one process, and one written by a tensor-parallel grid (tp 2
// x dp n/2) by the data-parallel ranks alone and by a grid of tp 4; each continues exactly
// as an uninterrupted run of its own layout does (losses within 1e-5 relative). Resumed on
// the ranks that wrote it, at any stage and in f32 or bf16, a checkpoint continues the run
// bit for bit, tensor-parallel too. A pipeline-parallel checkpoint (pp 2, with tp and dp)
// resumes on other pipeline, tensor and data-parallel degrees. ZeRO++ checkpoints resume under
// plain ZeRO-3 and back, and so do checkpoints of runs with the optimizer's state on NVMe
// under runs without offload. Under the delayed parameter update, a checkpoint applies the
// pending update before it saves, and a run resumed from it continues bit for bit the run
// that wrote it and went on. With offload to NVMe, a checkpoint streams through memory and
// writes what a save in memory writes, bit for bit. Checkpoints of runs with part of the
// optimizer's state on the host (offload_optimizer.ratio) resume with any ratio, without
// offload and on other ranks.
#include <boost/test/unit_test.hpp>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_dir.h"
#include "train/trainer.h"
#include "io/h5file.h"
#include "parallel/runtime.h"
#include "support/check.h"
#include "support/files.h"
#include "support/same_datasets.h"
#include "support/shared_corpus.h"
#include "support/training.h"

BOOST_AUTO_TEST_SUITE(test_checkpoint_mpi)

using namespace triad;

namespace {

nlohmann::json config_json(const std::string& folder, int stage) {
  nlohmann::json j = test::small_gpt_config(folder + "/tokens.bin", 20);
  j["gradient_accumulation_steps"] = 1;
  j["scheduler"] = {{"type", "WarmupCosineLR"}, {"params", {{"warmup_num_steps", 3}}}};
  j["zero_optimization"] = {{"stage", stage}, {"stage3_param_persistence_threshold", 0}};
  j["seed"] = 9;
  return j;
}

nlohmann::json tensor_parallel(nlohmann::json j, int tp) {
  j["model"]["n_head"] = 4;  // tp 4 must divide the heads
  j["model"]["tensor_parallel"] = tp;
  return j;
}

// offload_optimizer.device "cpu" runs ZeRO-Offload's host store on the CPU training device
// (its internal switch), as on a GPU.
void run(const nlohmann::json& j, const engine::TrainOptions& o, parallel::CommunicatorPtr dp) {
  engine::TrainConfig config = engine::parse_config(j, dp ? dp->size() : 1);
  zero::OffloadConfig& offload = config.zero.offload_optimizer;
  offload.host_store_on_cpu = offload.device == zero::OffloadDevice::cpu;
  engine::train(config, o, dp);
}

// The run resumed at step 10 (metrics resumed<tag>.jsonl) continues the uninterrupted one
// (straight<tag>.jsonl, 20 steps): each loss within `relative` of it (0: equal).
void expect_continues(const std::string& folder, const std::string& tag, double relative) {
  const std::vector<double> straight = test::metric_losses(folder + "/straight" + tag + ".jsonl");
  const std::vector<double> resumed = test::metric_losses(folder + "/resumed" + tag + ".jsonl");
  BOOST_TEST_REQUIRE(straight.size() == 20u);
  BOOST_TEST_REQUIRE(resumed.size() == 10u);
  for (size_t i = 0; i < resumed.size(); ++i)
    BOOST_TEST(std::abs(resumed[i] - straight[10 + i]) <= relative * straight[10 + i], "step " << 11 + i);
}

// The writer's run uninterrupted (straight<tag>.jsonl, 20 steps); its first ten steps with a
// checkpoint at the end, which it returns; and that checkpoint resumed on the same ranks
// (resumed<tag>.jsonl), continuing bit for bit.
std::string save_and_resume(nlohmann::json writer, const std::string& folder, const std::string& tag,
                            const parallel::CommunicatorPtr& world) {
  run(writer, {.metrics_path = folder + "/straight" + tag + ".jsonl"}, world);
  writer["steps"] = 10;
  writer["scheduler"]["params"]["total_num_steps"] = 20;
  writer["checkpoint"] = {{"dir", folder + "/ckpt" + tag}};
  run(writer, {}, world);
  writer["steps"] = 20;
  run(writer, {.metrics_path = folder + "/resumed" + tag + ".jsonl", .resume = "auto"}, world);
  if (world->rank() == 0) expect_continues(folder, tag, 0.0);
  return folder + "/ckpt" + tag + "/" + engine::checkpoint_file_name(10);
}

// A grid other than the writer's: its config, and the ranks that run it (`member`: this rank
// is one of them; `ranks` null: this process alone).
struct OtherGrid {
  std::string name, tag;
  nlohmann::json config;
  bool member;
  parallel::CommunicatorPtr ranks;
};

// Runs each grid uninterrupted (straight<tag>.jsonl) and resumed from `saved`
// (resumed<tag>.jsonl); the resumed run continues the uninterrupted one within 1e-5.
void resume_on_other_grids(const std::vector<OtherGrid>& grids, const std::string& saved, const std::string& folder,
                           parallel::Communicator& world) {
  for (const OtherGrid& g : grids) {
    if (g.member) {
      BOOST_TEST_CONTEXT(g.name) {
        run(g.config, {.metrics_path = folder + "/straight" + g.tag + ".jsonl"}, g.ranks);
        run(g.config, {.metrics_path = folder + "/resumed" + g.tag + ".jsonl", .resume = saved}, g.ranks);
        if (world.rank() == 0) expect_continues(folder, g.tag, 1e-5);
      }
    }
    world.barrier();
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(resuming_on_the_same_ranks_continues_bit_for_bit_at_every_stage) {
  const parallel::CommunicatorPtr world = parallel::world();
  test::TempDir dir;
  const std::string folder = test::shared_corpus(dir, *world);
  struct Case {
    int stage;
    const char* precision;  // "" or "bf16"
  };
  for (const Case& k : {Case{0, ""}, Case{0, "bf16"}, Case{1, ""}, Case{2, "bf16"}, Case{3, "bf16"}}) {
    const std::string tag = std::to_string(k.stage) + k.precision;
    BOOST_TEST_CONTEXT("stage " << k.stage << " " << (*k.precision ? k.precision : "f32")) {
      nlohmann::json j = config_json(folder, k.stage);
      if (*k.precision) j[k.precision] = {{"enabled", true}};
      run(j, {.metrics_path = folder + "/straight" + tag + ".jsonl"}, world);
      j["checkpoint"] = {{"dir", folder + "/ckpt" + tag}};
      j["steps"] = 10;  // the schedule's length is its own key: the first half is the same run
      j["scheduler"]["params"]["total_num_steps"] = 20;
      run(j, {}, world);
      j["steps"] = 20;
      run(j, {.metrics_path = folder + "/resumed" + tag + ".jsonl", .resume = "auto"}, world);
      if (world->rank() == 0) expect_continues(folder, tag, 0.0);
    }
    world->barrier();
  }
}

BOOST_AUTO_TEST_CASE(a_stage_3_checkpoint_resumes_on_fewer_ranks_at_other_stages) {
  const parallel::CommunicatorPtr world = parallel::world();
  const int n = world->size(), r = world->rank();
  test::TempDir dir;
  const std::string folder = test::shared_corpus(dir, *world);

  // All ranks, stage 3: ten steps of a twenty-step run, then a checkpoint.
  nlohmann::json writer = config_json(folder, 3);
  writer["steps"] = 10;
  writer["scheduler"]["params"]["total_num_steps"] = 20;
  writer["checkpoint"] = {{"dir", folder + "/ckpt"}};
  run(writer, {}, world);
  const std::string saved = folder + "/ckpt/" + engine::checkpoint_file_name(10);

  // Half the ranks at stage 1 (for two ranks: one, through MPI), and one process at stage 0.
  const int half = std::max(1, n / 2);
  const parallel::CommunicatorPtr halves = world->split(r < half ? 0 : 1, r);
  resume_on_other_grids({{"half the ranks, stage 1", "1", config_json(folder, 1), r < half, halves},
                         {"one process, stage 0", "0", config_json(folder, 0), r == 0, nullptr}},
                        saved, folder, *world);
  if (r == 0) {
    const engine::CheckpointSummary s = engine::read_summary(saved);
    BOOST_TEST(s.layout["dp"] == n);
    BOOST_TEST(s.layout["zero_stage"] == 3);
    BOOST_TEST(engine::failed_checksums(saved).empty());
    // Damage: one flipped byte inside the stored moments of the position embedding.
    const Tensor values = io::H5File::open(saved).read("/optim/wpe.weight/exp_avg");
    std::string bytes = test::read_bytes(saved);
    const size_t at = bytes.find(std::string(static_cast<const char*>(values.raw_data()), 64));
    BOOST_TEST_REQUIRE(at != std::string::npos);
    bytes[at + 9] ^= 0x01;
    test::write_bytes(saved, bytes);
  }
  world->barrier();
  // Every rank stops with the same error naming the file and the dataset; none hangs.
  const std::string m = test::error_message([&] { run(config_json(folder, 2), {.resume = saved}, world); });
  BOOST_TEST(m.find(saved) != std::string::npos, m);
  BOOST_TEST(m.find("/optim/wpe.weight/exp_avg fails its checksum") != std::string::npos, m);
  world->barrier();
}

BOOST_AUTO_TEST_CASE(a_tensor_parallel_checkpoint_holds_global_shapes_and_resumes_on_other_grids) {
  const parallel::CommunicatorPtr world = parallel::world();
  const int n = world->size(), r = world->rank();
  test::TempDir dir;
  const std::string folder = test::shared_corpus(dir, *world);

  // tp 2 x dp n/2 at stage 1: ten steps of a twenty-step run, then a checkpoint; and the same
  // run uninterrupted.
  // On the same grid it continues bit for bit.
  const std::string saved = save_and_resume(tensor_parallel(config_json(folder, 1), 2), folder, "_tp2", world);

  // Other grids: every rank data-parallel (tp 1), and tp 4 (on two ranks: one process).
  resume_on_other_grids(
      {{"tp 1 x dp n", "1n", tensor_parallel(config_json(folder, 2), 1), true, world},
       n >= 4 ? OtherGrid{"tp 4 x dp n/4", "4n", tensor_parallel(config_json(folder, 3), 4), true, world}
              : OtherGrid{"one process, tp 1", "11", tensor_parallel(config_json(folder, 2), 1), r == 0, nullptr}},
      saved, folder, *world);

  if (r == 0) {
    // The file holds every tensor at its global shape: the vocabulary unpadded (each tp rank
    // holds 64 rows of it, 48 of them padding or the other rank's), the fused q|k|v whole.
    const engine::CheckpointSummary s = engine::read_summary(saved);
    BOOST_TEST(s.layout["tp"] == 2);
    BOOST_TEST(s.layout["dp"] == n / 2);
    std::map<std::string, Shape> shapes;
    for (const auto& d : s.datasets) shapes[d.name] = d.shape;
    BOOST_TEST((shapes["/model/wte.weight"] == Shape{16, 16}));
    BOOST_TEST((shapes["/optim/wte.weight/exp_avg"] == Shape{16, 16}));
    BOOST_TEST((shapes["/model/blocks.0.attn.qkv.weight"] == Shape{48, 16}));
    BOOST_TEST((shapes["/model/blocks.1.mlp.proj.weight"] == Shape{16, 64}));
    BOOST_TEST(engine::failed_checksums(saved).empty());
    // Exported, it is an ordinary model of one process: its weights are the master weights.
    const std::string exported = folder + "/model.h5";
    engine::export_weights(saved, exported, DType::f32);
    const engine::LoadedModel m = engine::load_model(exported);
    const io::H5File file = io::H5File::open(saved);
    for (const auto& [name, p] : m.model->named_parameters())
      BOOST_TEST(test::max_abs_diff(p, file.read("/optim/" + name + "/master")) == 0.0, name);
  }
  world->barrier();
}

// Pipeline parallelism: a checkpoint written by pp 2 (x tp 2 on 4 ranks, x dp 2 on 8)
// continues bit for bit on its own grid, and within 1e-5 on a grid of other pipeline,
// tensor and data-parallel degrees and on one process; the file holds the whole model once
// (the token table, held by the first and last stages, in one dataset).
BOOST_AUTO_TEST_CASE(a_pipeline_checkpoint_resumes_on_other_grids) {
  const parallel::CommunicatorPtr world = parallel::world();
  const int n = world->size(), r = world->rank();
  test::TempDir dir;
  const std::string folder = test::shared_corpus(dir, *world);
  const auto grid = [](nlohmann::json j, int pp, int tp) {
    j = tensor_parallel(std::move(j), tp);
    j["pipeline"] = {{"stages", pp}};
    return j;
  };
  const int writer_tp = n >= 4 ? 2 : 1;
  const std::string saved = save_and_resume(grid(config_json(folder, 1), 2, writer_tp), folder, "_pp", world);

  resume_on_other_grids(
      {{"pp 1 x dp n", "_pp1tp1n", grid(config_json(folder, 2), 1, 1), true, world},
       n >= 4 ? OtherGrid{"pp 4 x tp n/4", "_pp4tp" + std::to_string(n / 4) + "n", grid(config_json(folder, 3), 4, n / 4),
                          true, world}
              : OtherGrid{"one process", "_pp1tp11", grid(config_json(folder, 0), 1, 1), r == 0, nullptr}},
      saved, folder, *world);
  if (r == 0) {
    const engine::CheckpointSummary s = engine::read_summary(saved);
    BOOST_TEST(s.layout["pp"] == 2);
    BOOST_TEST(s.layout["tp"] == writer_tp);
    size_t tables = 0;
    for (const auto& d : s.datasets) tables += d.name == "/model/wte.weight";
    BOOST_TEST(tables == 1u);
    BOOST_TEST(engine::failed_checksums(saved).empty());
    // Every parameter of the model is in the file, from whichever stage held it.
    const engine::LoadedModel m = engine::load_model(saved);
    BOOST_TEST(m.model->named_parameters().size() == 2u + 12u * 2u + 2u);  // wte wpe, blocks, ln_f
  }
  world->barrier();
}

// Expert parallelism: every expert is stored at its global name and full shape, optimizer
// state included (Note [ZeRO with experts]). A run at ep 2 (ep 4 from four ranks) resumes
// bit for bit on its ranks, and continues the uninterrupted run of one process at ep 1 and
// of half the ranks at ep 2 (n >= 4; on two ranks: both at ep 1) within 1e-5.
BOOST_AUTO_TEST_CASE(an_expert_parallel_checkpoint_resumes_at_other_expert_parallel_sizes) {
  const parallel::CommunicatorPtr world = parallel::world();
  const int n = world->size(), r = world->rank();
  test::TempDir dir;
  const std::string folder = test::shared_corpus(dir, *world);
  // The router losses are per micro-batch: every layout takes the writer's micro-batches.
  const auto moe = [&](int stage, int ep) {
    nlohmann::json j = config_json(folder, stage);
    j.erase("gradient_accumulation_steps");
    j["train_micro_batch_size_per_gpu"] = 16 / n;
    j["model"]["moe"] = {{"num_experts", 4},         {"every", 1},          {"top_k", 2},
                         {"drop_tokens", false},     {"top2_2nd_expert_sampling", false},
                         {"expert_parallel_size", ep}};
    return j;
  };
  const int writer_ep = std::min(n, 4);
  const std::string saved = save_and_resume(moe(2, writer_ep), folder, "_ep", world);
  const int half = n / 2;
  const parallel::CommunicatorPtr halves = world->split(r < half ? 0 : 1, r);
  resume_on_other_grids({n >= 4 ? OtherGrid{"half the ranks, ep 2, stage 3", "_ep2", moe(3, 2), r < half, halves}
                                : OtherGrid{"every rank, ep 1, stage 3", "_ep1n", moe(3, 1), true, world},
                         {"one process, ep 1, stage 0", "_ep1", moe(0, 1), r == 0, nullptr}},
                        saved, folder, *world);
  if (r == 0) {
    const engine::CheckpointSummary s = engine::read_summary(saved);
    BOOST_TEST(engine::failed_checksums(saved).empty());
    std::map<std::string, Shape> shapes;
    for (const auto& d : s.datasets) shapes[d.name] = d.shape;
    for (int e = 0; e < 4; ++e)
      for (const std::string& ds : {"/model/blocks.1.moe.experts." + std::to_string(e) + ".fc.weight",
                                    "/optim/blocks.1.moe.experts." + std::to_string(e) + ".fc.weight/exp_avg_sq"})
        BOOST_TEST((shapes.count(ds) == 1 && shapes[ds] == Shape{64, 16}), ds);
  }
  world->barrier();
}

// ZeRO++ (Note [ZeRO++]) changes how the collectives move the state, not the state: its
// checkpoints are ZeRO-3's. On ranks emulating two nodes (one rank each at n = 2, where hpZ
// stays off), with qwZ, hpZ and qgZ: resumed under ZeRO++, a run continues bit for bit;
// resumed under plain ZeRO-3 on every rank, it continues as one process at stage 0 resumed
// from it does (both exact arithmetic from the same state). And back: hpZ alone is exact,
// so a plain ZeRO-3 checkpoint resumed under hpZ continues the uninterrupted hpZ run, and an
// hpZ checkpoint resumed under plain ZeRO-3 the uninterrupted ZeRO-3 run, within 1e-5.
BOOST_AUTO_TEST_CASE(zeropp_checkpoints_resume_under_plain_zero3_and_back) {
  const parallel::CommunicatorPtr world = parallel::world();
  const int n = world->size(), r = world->rank(), local = std::max(1, n / 2);
  test::TempDir dir;
  const std::string folder = test::shared_corpus(dir, *world);
  const auto zeropp = [&](nlohmann::json j, bool quantized, int hpz) {
    j["cluster"] = {{"ranks_per_node", local}};
    j["zero_optimization"]["zero_hpz_partition_size"] = hpz;
    j["zero_optimization"]["zero_quantized_weights"] = quantized;
    j["zero_optimization"]["zero_quantized_gradients"] = quantized;
    j["zero_optimization"]["zeropp_quantization_block"] = 64;
    j["zero_optimization"]["zeropp_gradient_quantization_block"] = 64;
    return j;
  };
  const nlohmann::json zero3 = config_json(folder, 3), every = zeropp(zero3, true, local);

  const std::string saved = save_and_resume(every, folder, "_zpp", world);
  run(zero3, {.metrics_path = folder + "/zpp_as_zero3.jsonl", .resume = saved}, world);
  if (r == 0) {
    run(config_json(folder, 0), {.metrics_path = folder + "/zpp_as_one.jsonl", .resume = saved}, nullptr);
    const std::vector<double> many = test::metric_losses(folder + "/zpp_as_zero3.jsonl");
    const std::vector<double> one = test::metric_losses(folder + "/zpp_as_one.jsonl");
    BOOST_TEST_REQUIRE(many.size() == 10u);
    BOOST_TEST_REQUIRE(one.size() == 10u);
    for (size_t i = 0; i < many.size(); ++i) BOOST_TEST(std::abs(many[i] - one[i]) <= 1e-5 * one[i], "step " << 11 + i);
  }
  world->barrier();

  if (local > 1) {
    const nlohmann::json hpz = zeropp(zero3, false, local);
    resume_on_other_grids({{"plain ZeRO-3 resumed under hpZ", "_z3_as_hpz", hpz, true, world}},
                          save_and_resume(zero3, folder, "_z3", world), folder, *world);
    resume_on_other_grids({{"hpZ resumed under plain ZeRO-3", "_hpz_as_z3", zero3, true, world}},
                          save_and_resume(hpz, folder, "_hpz", world), folder, *world);
  }
}

// ZeRO-Offload (Note [Offloaded optimizer state]): a run whose master weights and moments
// live in NVMe files (bf16, sub-groups of 500 elements through two buffers, read ahead and
// written behind) saves them into the same checkpoint as any run: resumed with offload it
// continues bit for bit; resumed without offload (stage 2) it continues the run without
// offload; and a checkpoint of a run without offload (stage 3) resumed with offload
// continues the offloaded run (both within 1e-5). ZeRO-Infinity (Note [Offloaded
// parameters]): a stage-3 f32 run with its parameter shards in swap files as well resumes
// bit for bit with offload and continues the run without offload within 1e-5. The state
// and swap files go with each run.
BOOST_AUTO_TEST_CASE(offloaded_checkpoints_resume_with_and_without_offload) {
  const parallel::CommunicatorPtr world = parallel::world();
  test::TempDir dir;
  const std::string folder = test::shared_corpus(dir, *world), nvme = folder + "/nvme";  // every rank's files
  if (world->rank() == 0) std::filesystem::create_directory(nvme);
  world->barrier();
  const auto bf16 = [](nlohmann::json j) {
    j["bf16"] = {{"enabled", true}};
    return j;
  };
  const auto offloaded = [&](nlohmann::json j) {
    j["zero_optimization"]["offload_optimizer"] = {{"device", "nvme"},       {"nvme_path", nvme},
                                                   {"buffer_count", 2},      {"pipeline_read", true},
                                                   {"pipeline_write", true}};
    j["zero_optimization"]["sub_group_size"] = 500;
    return j;
  };
  const std::string saved = save_and_resume(offloaded(bf16(config_json(folder, 2))), folder, "_nvme", world);
  resume_on_other_grids({{"without offload", "_nvme_as_plain", bf16(config_json(folder, 2)), true, world}}, saved,
                        folder, *world);
  resume_on_other_grids({{"with offload", "_plain_as_nvme", offloaded(bf16(config_json(folder, 3))), true, world}},
                        save_and_resume(bf16(config_json(folder, 3)), folder, "_plain", world), folder, *world);
  nlohmann::json infinity = offloaded(config_json(folder, 3));
  infinity["zero_optimization"]["offload_param"] = {{"device", "nvme"}, {"nvme_path", nvme}, {"buffer_count", 2}};
  resume_on_other_grids({{"parameters offloaded, resumed without offload", "_params_as_plain", config_json(folder, 3),
                          true, world}},
                        save_and_resume(infinity, folder, "_params", world), folder, *world);
  world->barrier();  // every rank's runs have removed their swap files
  const bool swap_files_removed = std::filesystem::is_empty(nvme);
  world->barrier();  // before rank 0's folder goes
  BOOST_TEST(swap_files_removed);
}

// Partial offload (Note [Partial offload]; the host store forced on the CPU, sub-groups of
// 500 elements): a stage-2 run with half its state on the host resumes bit for bit as it
// was, in bf16 (master weights in the checkpoint) and f32, and continues with all its state
// on the host (ratio 1) and without offload; and a checkpoint of a run without offload
// continues with ratio 0.5, in bf16 and f32. Half the ranks (f32: bf16's trajectories differ
// between data-parallel sizes by more than 1e-5) resume either at another stage and ratio.
// Each within 1e-5 of the resuming layout's run.
BOOST_AUTO_TEST_CASE(partially_offloaded_checkpoints_resume_with_any_ratio) {
  const parallel::CommunicatorPtr world = parallel::world();
  const int n = world->size(), r = world->rank(), half = std::max(1, n / 2);
  const parallel::CommunicatorPtr halves = world->split(r < half ? 0 : 1, r);
  test::TempDir dir;
  const std::string folder = test::shared_corpus(dir, *world);
  const auto bf16 = [&](int stage) {
    nlohmann::json j = config_json(folder, stage);
    j["bf16"] = {{"enabled", true}};
    return j;
  };
  const auto offloaded = [](nlohmann::json j, double ratio) {
    j["zero_optimization"]["offload_optimizer"] = {{"device", "cpu"}, {"ratio", ratio}};
    j["zero_optimization"]["sub_group_size"] = 500;
    return j;
  };
  resume_on_other_grids({{"bf16, ratio 1", "_half_as_all", offloaded(bf16(2), 1.0), true, world},
                         {"bf16, without offload", "_half_as_plain", bf16(2), true, world}},
                        save_and_resume(offloaded(bf16(2), 0.5), folder, "_half", world), folder, *world);
  resume_on_other_grids({{"bf16, ratio 0.5", "_plain_as_half", offloaded(bf16(3), 0.5), true, world}},
                        save_and_resume(bf16(3), folder, "_plain", world), folder, *world);
  resume_on_other_grids(
      {{"f32, ratio 1", "_half32_as_all", offloaded(config_json(folder, 2), 1.0), true, world},
       {"f32, half the ranks, stage 3, without offload", "_half32_on_half", config_json(folder, 3), r < half, halves}},
      save_and_resume(offloaded(config_json(folder, 2), 0.5), folder, "_half32", world), folder, *world);
  resume_on_other_grids({{"f32, ratio 0.5", "_plain32_as_half", offloaded(config_json(folder, 3), 0.5), true, world},
                         {"f32, half the ranks, stage 1, ratio 0.5", "_plain32_on_half",
                          offloaded(config_json(folder, 1), 0.5), r < half, halves}},
                        save_and_resume(config_json(folder, 3), folder, "_plain32", world), folder, *world);
}

// Note [Delayed parameter update]: saving applies the pending update, so the step after a
// save takes its gradient at the updated weights in the run that goes on and in one resumed
// from the checkpoint alike: a run saving every 10 steps (straight) and its checkpoint of
// step 10 resumed follow one trajectory, bit for bit, at stage 1 and at stage 2 with the
// optimizer's state on NVMe.
BOOST_AUTO_TEST_CASE(a_delayed_update_checkpoint_resumes_on_the_same_trajectory) {
  const parallel::CommunicatorPtr world = parallel::world();
  test::TempDir dir;
  const std::string folder = test::shared_corpus(dir, *world), nvme = folder + "/nvme_delayed";  // every rank's files
  if (world->rank() == 0) std::filesystem::create_directory(nvme);
  world->barrier();
  for (int stage : {1, 2}) {
    const std::string tag = "_delayed" + std::to_string(stage);
    BOOST_TEST_CONTEXT("stage " << stage) {
      nlohmann::json j = config_json(folder, stage);
      j["zero_optimization"]["delayed_update"] = {{"enabled", true}, {"warmup_steps", 3}};
      if (stage == 2)
        j["zero_optimization"]["offload_optimizer"] = {
            {"device", "nvme"}, {"nvme_path", nvme}, {"pipeline_write", true}};
      j["checkpoint"] = {{"dir", folder + "/ckpt_straight" + tag}, {"every", 10}};
      run(j, {.metrics_path = folder + "/straight" + tag + ".jsonl"}, world);
      j["checkpoint"] = {{"dir", folder + "/ckpt" + tag}};
      j["steps"] = 10;
      j["scheduler"]["params"]["total_num_steps"] = 20;
      run(j, {}, world);
      j["steps"] = 20;
      run(j, {.metrics_path = folder + "/resumed" + tag + ".jsonl", .resume = "auto"}, world);
      if (world->rank() == 0) expect_continues(folder, tag, 0.0);
    }
    world->barrier();
  }
}

// Note [Streamed checkpoints]: with the parameters and the optimizer's state in NVMe swap
// files (ZeRO-3, f32 and bf16, sub-groups of 500 elements), a checkpoint is loaded and saved a
// batch of flat groups at a time. Loading the checkpoint of a run without offload into the
// offloaded engine and saving it again writes every dataset bit for bit as the file holds it
// (the checksums too), and its weights file is the one the engine without offload writes;
// the parameter shards in memory at once never exceed the largest group's shard (they were
// the whole model's). On all ranks and on one. A streamed save whose swap file is truncated
// underneath (on the last rank) fails on every rank naming that file, and the folder's
// earlier checkpoint stays `latest`, verifies, and no temporary file is left; a load into
// that engine fails on every rank naming the file too.
BOOST_AUTO_TEST_CASE(a_streamed_save_of_offloaded_state_writes_what_a_save_in_memory_writes) {
  const parallel::CommunicatorPtr world = parallel::world();
  const int r = world->rank();
  test::TempDir dir;
  const std::string folder = test::shared_corpus(dir, *world), nvme = folder + "/nvme_streamed";
  if (r == 0) std::filesystem::create_directory(nvme);
  world->barrier();
  const parallel::CommunicatorPtr alone = world->split(r == 0 ? 0 : 1, r);
  for (const bool bf16 : {false, true})
    for (const bool everyone : {true, false}) {
      const std::string tag = std::string(bf16 ? "bf16" : "f32") + (everyone ? "_all" : "_one");
      const parallel::CommunicatorPtr ranks = everyone ? world : alone;
      if (!everyone && r != 0) continue;
      BOOST_TEST_CONTEXT(tag) {
        const int n = ranks->size();
        nlohmann::json plain = config_json(folder, 3);
        if (bf16) plain["bf16"] = {{"enabled", true}};
        plain["steps"] = 4;
        plain["checkpoint"] = {{"dir", folder + "/ckpt_streamed_" + tag}};
        run(plain, {}, ranks);
        const std::string saved = folder + "/ckpt_streamed_" + tag + "/" + engine::checkpoint_file_name(4);
        nlohmann::json offloaded = plain;
        offloaded["zero_optimization"]["offload_optimizer"] = {
            {"device", "nvme"}, {"nvme_path", nvme}, {"buffer_count", 2}};
        offloaded["zero_optimization"]["offload_param"] = {
            {"device", "nvme"}, {"nvme_path", nvme}, {"buffer_count", 2}};
        offloaded["zero_optimization"]["sub_group_size"] = 500;
        const engine::TrainConfig pc = engine::parse_config(plain, n), oc = engine::parse_config(offloaded, n);
        const std::string resaved = folder + "/resaved_" + tag + ".h5", weights = folder + "/weights_" + tag + ".h5",
                          plain_weights = folder + "/plain_weights_" + tag + ".h5";
        {
          engine::Engine e(pc, engine::process_grid(pc, ranks));
          engine::load_checkpoint(saved, e, *ranks);
          engine::save_weights(plain_weights, e, *ranks, DType::f32);
        }
        engine::Engine e(oc, engine::process_grid(oc, ranks));
        engine::load_checkpoint(saved, e, *ranks);
        engine::save_checkpoint(resaved, e, *ranks);
        engine::save_weights(weights, e, *ranks, DType::f32);
        int64_t largest = 0;  // the largest group's shard, in bytes
        for (const auto& [padded, partitioned] : e.zero()->group_sizes())
          if (partitioned) largest = std::max(largest, padded / n * int64_t(element_size(pc.precision.dtype)));
        const zero::ParamSwap& swap = *e.zero()->param_swap();
        BOOST_TEST(swap.peak_resident_bytes() > 0);
        BOOST_TEST(swap.peak_resident_bytes() <= largest);
        if (ranks->rank() == 0) {
          test::check_same_datasets(saved, resaved);
          test::check_same_datasets(plain_weights, weights);
        }
        ranks->barrier();

        // A save into the checkpoint folder, with the last rank's parameter swap file cut short.
        const std::string ckpt = folder + "/ckpt_streamed_" + tag;
        if (ranks->rank() == n - 1) BOOST_TEST_REQUIRE(::truncate(swap.path().c_str(), 0) == 0);
        ranks->barrier();
        const std::string m = test::error_message([&] { engine::save_to_dir(ckpt, 0, e, *ranks); });
        const int last = everyone ? world->size() - 1 : 0;  // its world rank names its file
        BOOST_TEST(m.find("triad-params-rank" + std::to_string(last) + "-") != std::string::npos, m);
        BOOST_TEST((m.find(swap.path()) != std::string::npos || ranks->rank() != n - 1), m);
        BOOST_TEST(m.find(engine::checkpoint_file_name(4)) != std::string::npos, m);
        // So does a load, which reads the shards in to replace them.
        const std::string l = test::error_message([&] { engine::load_checkpoint(saved, e, *ranks); });
        BOOST_TEST(l.find("triad-params-rank" + std::to_string(last) + "-") != std::string::npos, l);
        ranks->barrier();
        if (ranks->rank() == 0) {
          BOOST_TEST(engine::latest_checkpoint(ckpt) == saved);
          BOOST_TEST(engine::failed_checksums(saved).empty());
          for (const auto& entry : std::filesystem::directory_iterator(ckpt))
            BOOST_TEST(entry.path().extension() != ".tmp", entry.path());
        }
        ranks->barrier();
      }
    }
  world->barrier();
}

BOOST_AUTO_TEST_SUITE_END()  // test_checkpoint_mpi
