// The training path end to end on a small synthetic token file: validation loss falls,
// bad inputs stop with messages naming the file or step, and a failed run leaves the model
// file of an earlier run untouched.
#include <boost/test/unit_test.hpp>
#include <fstream>

#include "autograd/fake_quantize.h"
#include "checkpoint/checkpoint.h"
#include "config/model_factory.h"
#include "io/token_file.h"
#include "support/check.h"
#include "support/files.h"
#include "tensor/host_reads.h"
#include "train/compression_training.h"
#include "train/trainer.h"
#include "triad.h"

BOOST_AUTO_TEST_SUITE(test_trainer)

using namespace triad;
using test::TempDir;

namespace {

// A period-7 pattern (3 1 4 1 5 9 2: after a 1 comes a 4 or a 5, so the model must look
// two tokens back) in a vocabulary of 16, where guessing costs ln 16 = 2.77.
std::string write_tokens(const TempDir& dir) {
  std::vector<uint32_t> tokens;
  const uint32_t pattern[7] = {3, 1, 4, 1, 5, 9, 2};
  for (uint32_t i = 0; i < 6000; ++i) tokens.push_back(pattern[i % 7]);
  const std::string path = dir.file("tokens.bin");
  io::write_token_file(path, tokens, 16);
  return path;
}

nlohmann::json tiny_config(const std::string& corpus) {
  nlohmann::json j = {{"model", {{"n_layer", 2}, {"n_head", 2}, {"d_model", 32}, {"seq_len", 32}, {"vocab_size", 16}}},
                      {"data", {{"corpus", corpus}, {"val_fraction", 0.1}}},
                      {"train_batch_size", 8},
                      {"train_micro_batch_size_per_gpu", 4},
                      {"steps", 120},
                      {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 1e-2}, {"betas", {0.9, 0.95}}}}}},
                      {"gradient_clipping", 1.0},
                      {"eval_interval", 0},
                      {"eval_iters", 4},
                      {"log_interval", 20},
                      {"seed", 3}};
  return j;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// The metrics file's lines, each without its timings (step_ms, tokens_per_s): what a step
// computed, which must not depend on when the host read it.
std::vector<nlohmann::json> computed_metrics(const std::string& path) {
  std::ifstream in(path);
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(in, line);) {
    nlohmann::json j = nlohmann::json::parse(line);
    j.erase("step_ms"), j.erase("tokens_per_s");
    lines.push_back(std::move(j));
  }
  return lines;
}

// The step an error message names ("... at step N ...").
int64_t step_named(const std::string& message) {
  const size_t at = message.find("at step ");
  BOOST_REQUIRE(at != std::string::npos);
  return std::stoll(message.substr(at + 8));
}

}  // namespace

BOOST_AUTO_TEST_CASE(short_run_learns_the_pattern_and_saves_a_loadable_model) {
  TempDir dir;
  nlohmann::json j = tiny_config(write_tokens(dir));
  j["output_dir"] = dir.file("model");
  const engine::TrainConfig c = engine::parse_config(j);
  const double val = engine::train(c, {.metrics_path = dir.file("metrics.jsonl")});
  // Measured 0.0086 after 120 steps (seed 3): a tenth of the threshold.
  BOOST_TEST(val < 0.1);

  std::ifstream metrics(dir.file("metrics.jsonl"));
  std::string line;
  int lines = 0;
  nlohmann::json last;
  while (std::getline(metrics, line)) last = nlohmann::json::parse(line), ++lines;
  BOOST_TEST(lines == 120);
  for (const char* key : {"step", "loss", "lr", "grad_norm", "step_ms", "tokens_per_s", "val_loss"})
    BOOST_TEST(last.contains(key), key);
  // The step's activation peak is at least what one micro-batch's forward keeps (Note
  // [Activation bytes], B 4, T 32, C 32, NH 2, V 16): 2 blocks of 64BTC + 16BT + 4B·NH·T
  // (265216 each), the head's 8BTC + 8BT (33792), the loss's 4BTV + 4BT + 8 (8712):
  // 572936, all held at the end of each forward. Above it the backward's gradients, at
  // most the parameters' (4 bytes x 27008) and one block's worth of transients.
  const double peak = last["mem"]["activation_peak_bytes"].get<double>();
  BOOST_TEST(peak >= 572936.0);
  BOOST_TEST(peak <= 572936.0 + 4 * 27008 + 265216);

  const engine::LoadedModel loaded = engine::load_model(dir.file("model/model.h5"));
  BOOST_TEST(loaded.model->num_parameters() == nn::GPT(c.model).num_parameters());
  BOOST_TEST(loaded.config["steps"] == 120);
}

BOOST_AUTO_TEST_CASE(missing_and_corrupt_files_name_the_file) {
  TempDir dir;
  nlohmann::json j = tiny_config(dir.file("absent.bin"));
  BOOST_TEST(contains(test::error_message([&] { engine::train(engine::parse_config(j), {}); }), "absent.bin"));

  const std::string corpus = write_tokens(dir);
  std::string bytes = test::read_bytes(corpus);
  bytes[bytes.size() / 2] ^= 0x5a;
  std::ofstream(dir.file("corrupt.bin"), std::ios::binary) << bytes;
  j["data"]["corpus"] = dir.file("corrupt.bin");
  BOOST_TEST(contains(test::error_message([&] { engine::train(engine::parse_config(j), {}); }), "corrupt.bin"));

  j["data"]["corpus"] = corpus;
  j["data"]["tokenizer"] = dir.file("no_tokenizer.json");
  BOOST_TEST(contains(test::error_message([&] { engine::train(engine::parse_config(j), {}); }), "no_tokenizer.json"));

  BOOST_TEST(
      contains(test::error_message([] { engine::load_model("/nonexistent/model.h5"); }), "/nonexistent/model.h5"));
}

BOOST_AUTO_TEST_CASE(data_that_does_not_fit_the_model_is_rejected) {
  TempDir dir;
  nlohmann::json j = tiny_config(write_tokens(dir));
  j["model"]["vocab_size"] = 8;  // the file holds 16 kinds of token
  BOOST_TEST(contains(test::error_message([&] { engine::train(engine::parse_config(j), {}); }), "vocabulary of 16"));
  j = tiny_config(write_tokens(dir));
  j["data"]["val_fraction"] = 0.001;  // 6 validation tokens for sequences of 32
  BOOST_TEST(contains(test::error_message([&] { engine::train(engine::parse_config(j), {}); }), "validation split"));
}

BOOST_AUTO_TEST_CASE(a_diverging_run_stops_and_keeps_the_earlier_model) {
  TempDir dir;
  nlohmann::json j = tiny_config(write_tokens(dir));
  j["output_dir"] = dir.file("model");
  j["steps"] = 2;
  engine::train(engine::parse_config(j), {});
  const std::string saved = test::read_bytes(dir.file("model/model.h5"));
  BOOST_REQUIRE(!saved.empty());

  j["steps"] = 200;
  j["optimizer"] = {{"type", "SGD"}, {"params", {{"lr", 10.0}, {"momentum", 0.99}}}};
  j.erase("gradient_clipping");
  const std::string m = test::error_message([&] { engine::train(engine::parse_config(j), {}); });
  BOOST_TEST(contains(m, "at step"), m);
  BOOST_TEST(contains(m, "nothing was saved"), m);
  BOOST_TEST(test::read_bytes(dir.file("model/model.h5")) == saved);
}

// Note [Host synchronisation in a step]: a step reads nothing on the host; each read of the
// steps queued since the last one (at the log steps and the last) reads their values once
// and their loss sums over the data-parallel ranks once.
BOOST_AUTO_TEST_CASE(the_host_reads_the_steps_at_log_intervals_only) {
  TempDir dir;
  const std::string corpus = write_tokens(dir);
  const auto reads = [&](int64_t steps, int64_t log_interval) {
    nlohmann::json j = tiny_config(corpus);
    j["steps"] = steps, j["log_interval"] = log_interval;
    const engine::TrainConfig c = engine::parse_config(j);
    const uint64_t before = host_reads();
    engine::train(c, {});
    return host_reads() - before;
  };
  const uint64_t ten_steps = reads(10, 5);
  BOOST_TEST(reads(20, 10) == ten_steps);     // twice the steps, two reads as well: none per step
  BOOST_TEST(reads(15, 5) == ten_steps + 2);  // a third read
}

// Read every log_interval steps, every step is reported as when each was read at its end:
// the same metrics line per step, and an fp16 run's overflowing steps skipped with the loss
// scale moving by DeepSpeed's rule (halved after `hysteresis` overflows, doubled after
// `loss_scale_window` clean steps, hysteresis refilled then).
BOOST_AUTO_TEST_CASE(steps_read_at_intervals_report_what_each_step_computed) {
  TempDir dir;
  nlohmann::json j = tiny_config(write_tokens(dir));
  j["steps"] = 20;
  j["fp16"] = {{"enabled", true}, {"initial_scale_power", 24}, {"loss_scale_window", 3}, {"hysteresis", 2}};
  j["log_interval"] = 1;
  engine::train(engine::parse_config(j), {.metrics_path = dir.file("each.jsonl")});
  j["log_interval"] = 5;
  engine::train(engine::parse_config(j), {.metrics_path = dir.file("interval.jsonl")});
  const std::vector<nlohmann::json> each = computed_metrics(dir.file("each.jsonl"));
  BOOST_REQUIRE(each.size() == 20u);
  BOOST_TEST(computed_metrics(dir.file("interval.jsonl")) == each);

  double scale = 0x1p24;
  int hysteresis = 2, skipped = 0;
  int64_t clean = 0;
  for (const nlohmann::json& line : each) {
    if (line["skipped"].get<bool>()) {
      ++skipped, clean = 0;
      if (hysteresis <= 1)
        scale = std::max(scale / 2, 1.0);
      else
        --hysteresis;
    } else if (++clean % 3 == 0) {
      hysteresis = 2, scale *= 2;
    }
    BOOST_TEST(line["loss_scale"].get<double>() == scale, line.dump());
  }
  BOOST_TEST(each.front()["skipped"].get<bool>());  // 2^24 overflows f16 at once
  BOOST_TEST(skipped >= 2);
  BOOST_TEST(skipped <= 16);
}

// Note [Recorded steps]: with cuda_graph.enabled (on the CPU the step runs as it would be
// recorded: its micro-batches in fixed buffers, Adam's constants read from memory) every
// step computes what the plain step computes, bit for bit, through warmup and a changing
// rate, with gradient accumulation and clipping, in f32 and bf16; what a recording cannot
// hold is refused naming the keys.
BOOST_AUTO_TEST_CASE(a_recorded_step_trains_as_the_plain_step) {
  TempDir dir;
  nlohmann::json j = tiny_config(write_tokens(dir));
  j["steps"] = 12, j["log_interval"] = 5;
  j["optimizer"]["params"]["weight_decay"] = 0.1;
  j["scheduler"] = {{"type", "WarmupCosineLR"}, {"params", {{"warmup_num_steps", 4}, {"cos_min_ratio", 0.1}}}};
  const auto computed = [](const std::string& path) {
    std::vector<nlohmann::json> steps;
    for (const nlohmann::json& line : computed_metrics(path))
      steps.push_back({line["step"], line["loss"], line["grad_norm"], line["lr"], line.value("loss_scale", 1.0),
                       line.value("skipped", false)});
    return steps;
  };
  // fp16: 2^20 overflows the first steps, skipped on the device (Note [Loss scale on the
  // device]); a window of 3 then doubles the scale back into overflows.
  for (const std::string precision : {"f32", "bf16", "fp16"}) {
    j["bf16"] = {{"enabled", precision == "bf16"}};
    j["fp16"] = {
        {"enabled", precision == "fp16"}, {"initial_scale_power", 20}, {"loss_scale_window", 3}, {"hysteresis", 1}};
    j.erase("cuda_graph");
    const std::string plain = dir.file("plain.jsonl"), recorded = dir.file("recorded.jsonl");
    engine::train(engine::parse_config(j), {.metrics_path = plain});
    j["cuda_graph"] = {{"enabled", true}, {"warmup_steps", 2}};
    engine::train(engine::parse_config(j), {.metrics_path = recorded});
    const std::vector<nlohmann::json> want = computed(plain);
    BOOST_REQUIRE(want.size() == 12u);
    BOOST_TEST(computed(recorded) == want, precision);
    BOOST_TEST(want[3][3].get<double>() != want[9][3].get<double>());  // the rate changed
    if (precision != "fp16") continue;
    int64_t skipped = 0;
    for (const nlohmann::json& s : want) skipped += s[5].get<bool>();
    BOOST_TEST(skipped >= 2);
    BOOST_TEST(skipped <= 8);
  }
  j["bf16"] = {{"enabled", false}};
  j["fp16"] = {{"enabled", false}};
  const auto refused = [&](const std::string& key, const nlohmann::json& value, int64_t ranks,
                           const std::vector<std::string>& parts) {
    nlohmann::json c = j;
    if (!key.empty()) c[key] = value;
    test::check_error([&] { engine::parse_config(c, ranks); }, parts);
  };
  refused("", nullptr, 2, {"cuda_graph.enabled", "data_parallel 2"});
  refused("wall_clock_breakdown", true, 1, {"cuda_graph.enabled", "wall_clock_breakdown"});
  nlohmann::json dropout = j;
  dropout["model"]["dropout"] = 0.1;
  test::check_error([&] { engine::parse_config(dropout); }, {"cuda_graph.enabled", "model.dropout"});
  dropout["cuda_graph"]["warmup_steps"] = 0;
  test::check_error([&] { engine::parse_config(dropout); }, {"cuda_graph.warmup_steps"});
  // A step that draws random numbers all the same (as a layer list's dropout would) fails
  // its recording: a replay would repeat the draws.
  engine::TrainConfig c = engine::parse_config(j);
  c.model.dropout = 0.1;
  engine::Engine drawing(c);
  const std::vector<Tensor> batch(2, Tensor::zeros({4, 32}, DType::i64));
  for (int s = 0; s < 2; ++s) drawing.train_step(batch, batch);  // the warmup steps
  test::check_error([&] { drawing.train_step(batch, batch); }, {"cuda_graph.enabled", "random numbers", "dropout"});
}

// A step whose loss or gradient norm is not finite, read with later steps, is named as when
// every step is read; the steps before it are reported, and a checkpoint due after it (but
// before the read) is not written.
BOOST_AUTO_TEST_CASE(a_diverging_step_inside_an_interval_is_named_and_nothing_after_it_is_saved) {
  TempDir dir;
  nlohmann::json j = tiny_config(write_tokens(dir));
  j["steps"] = 200;
  j["optimizer"] = {{"type", "SGD"}, {"params", {{"lr", 10.0}, {"momentum", 0.99}}}};
  j.erase("gradient_clipping");
  j["log_interval"] = 1;
  const std::string each =
      test::error_message([&] { engine::train(engine::parse_config(j), {.metrics_path = dir.file("each.jsonl")}); });
  const int64_t diverged = step_named(each);
  BOOST_REQUIRE(diverged >= 2);
  j["log_interval"] = diverged + 4;
  j["checkpoint"] = {{"every", diverged + 2}};  // read then, step `diverged` two steps before
  const std::string interval = test::error_message([&] {
    engine::train(engine::parse_config(j),
                  {.metrics_path = dir.file("interval.jsonl"), .save_dir = dir.file("checkpoints")});
  });
  BOOST_TEST(interval == each);
  const std::vector<nlohmann::json> before = computed_metrics(dir.file("each.jsonl"));
  BOOST_TEST(int64_t(before.size()) == diverged - 1);
  BOOST_TEST(computed_metrics(dir.file("interval.jsonl")) == before);
  BOOST_TEST((!std::filesystem::exists(dir.file("checkpoints")) || std::filesystem::is_empty(dir.file("checkpoints"))));
}

// compression_training's schedule on a GPT's linear layers: nothing before the offsets;
// then the attention's weights fake-quantized at the scheduled bits with quantize_groups
// groups per row and the MLP's fc inputs per token, each layer's output equal to the
// formula's; changes reported once; groups that do not fit a layer named.
BOOST_AUTO_TEST_CASE(compression_training_quantizes_the_groups_layers_on_schedule) {
  nlohmann::json j = tiny_config("unused.bin");
  j["compression_training"] = nlohmann::json::parse(R"({
    "weight_quantization": {
      "shared_parameters": {"enabled": true, "schedule_offset": 1, "quantize_groups": 2},
      "different_groups": {"wq1": {"params": {"start_bits": 8, "target_bits": 2, "quantization_period": 2},
                                   "modules": ["attn"]}}},
    "activation_quantization": {
      "shared_parameters": {"enabled": true, "schedule_offset": 2},
      "different_groups": {"aq1": {"params": {"bits": 8}, "modules": ["mlp\\.fc"]}}}
  })");
  const engine::TrainConfig c = engine::parse_config(j);
  const std::shared_ptr<nn::LanguageModel> model = engine::build_model(c);
  const nn::ModulePtr module = model;
  auto* gpt = dynamic_cast<nn::GPT*>(model.get());
  BOOST_REQUIRE(gpt);
  auto& block = dynamic_cast<nn::Block&>(*(*gpt->blocks)[0]);
  const auto input = [](const nn::Linear& l) {  // 3 tokens of the layer's input dimension
    Tensor x = Tensor::empty({3, l.weight.size(1)});
    Generator gen(5);
    ops::uniform_(x, -1.0, 1.0, gen);
    return x;
  };
  const auto out = [&](nn::Linear& l) {
    NoGradGuard no_grad;
    return l(input(l));
  };
  const auto formula = [&](nn::Linear& l, int bits, bool tokens) {  // quantize_groups 2: groups of K / 2
    NoGradGuard no_grad;
    const int64_t k = l.weight.size(1);
    const Tensor w = bits > 0 ? fake_quantize(l.weight, QuantFormat{bits, k / 2}) : l.weight;
    return linear(tokens ? fake_quantize(input(l), QuantFormat{8, k}) : input(l), w, l.bias);
  };
  engine::QuantizationSchedule schedule(c.compression);
  const std::vector<std::pair<int64_t, int>> bits = {{0, 0}, {1, 8}, {2, 8}, {3, 4}, {4, 4}, {5, 2}, {9, 2}};
  for (const auto& [step, b] : bits) {
    const std::vector<std::string> changes = schedule.apply(module, step);
    BOOST_TEST_CONTEXT("step " << step) {
      BOOST_TEST(test::max_abs_diff(out(*block.attn->qkv), formula(*block.attn->qkv, b, false)) == 0.0);
      BOOST_TEST(test::max_abs_diff(out(*block.mlp->fc), formula(*block.mlp->fc, 0, step >= 2)) == 0.0);
      BOOST_TEST(test::max_abs_diff(out(*block.mlp->proj), formula(*block.mlp->proj, 0, false)) == 0.0);
    }
    if (step == 0) BOOST_TEST(changes.size() == 2u);
    if (step == 3) BOOST_TEST(changes == std::vector<std::string>({"compression: step 3, weight group wq1: 4 bits"}));
    if (step == 4 || step == 9) BOOST_TEST(changes.empty());
  }
  BOOST_TEST(test::max_abs_diff(formula(*block.attn->qkv, 2, false), formula(*block.attn->qkv, 0, false)) > 0.0);

  j["compression_training"]["weight_quantization"]["shared_parameters"]["quantize_groups"] = 3;
  engine::QuantizationSchedule bad(engine::parse_config(j).compression);
  test::check_error([&] { bad.apply(module, 1); }, {"quantize_groups 3", "input dimension 32", "blocks.0.attn.qkv"});
}

// layer_reduction: the student (1 block) starts from block 1 of the --init model, and
// trains from there with its weights fake-quantized; without --init it is an error.
BOOST_AUTO_TEST_CASE(compression_training_layer_reduction_starts_from_the_chosen_blocks) {
  TempDir dir;
  nlohmann::json teacher = tiny_config(write_tokens(dir));
  teacher["steps"] = 60;
  teacher["output_dir"] = dir.file("teacher");
  const double teacher_val = engine::train(engine::parse_config(teacher), {});
  nlohmann::json j = tiny_config(write_tokens(dir));
  j["model"]["n_layer"] = 1;
  j["steps"] = 20;
  j["compression_training"] = nlohmann::json::parse(R"({
    "layer_reduction": {"enabled": true, "keep_number_layer": 1, "teacher_layer": [1]},
    "weight_quantization": {"shared_parameters": {"enabled": true},
                            "different_groups": {"wq1": {"params": {"start_bits": 8, "target_bits": 4,
                                                                    "quantization_period": 10}}}}
  })");
  const engine::TrainConfig c = engine::parse_config(j);
  const std::shared_ptr<nn::LanguageModel> student = engine::build_model(c);
  engine::reduce_layers(*student, dir.file("teacher/model.h5"), c.compression.layer_reduction);
  const engine::LoadedModel t = engine::load_model(dir.file("teacher/model.h5"));
  std::map<std::string, Tensor> tp;
  for (const auto& [name, p] : t.model->named_parameters()) tp.emplace(name, p);
  for (const auto& [name, p] : student->named_parameters()) {
    const std::string from = name.starts_with("blocks.0.") ? "blocks.1." + name.substr(9) : name;
    BOOST_TEST(test::max_abs_diff(p, tp.at(from)) == 0.0, name << " from " << from);
  }
  const double val = engine::train(c, {.init = dir.file("teacher/model.h5")});
  BOOST_TEST_MESSAGE("teacher val " << teacher_val << ", 1-block W4 student val " << val);
  // Measured 0.196 against the 2-block f32 teacher's 0.182 (guessing: ln 16 = 2.77).
  BOOST_TEST(val < 0.5);
  test::check_error([&] { engine::train(c, {}); }, {"compression_training.layer_reduction needs --init"});
}

BOOST_AUTO_TEST_SUITE_END()  // test_trainer
