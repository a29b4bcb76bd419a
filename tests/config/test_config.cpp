// Config validation: each kind of bad value gives a message naming the key, the value and
// what is allowed; batch sizes resolve as DeepSpeed's do; --set overrides; distributed_backend
// resolves by device, build and ranks.
#include <algorithm>
#include <boost/test/unit_test.hpp>

#include "cuda/nccl_communicator.h"
#include "config/config.h"
#include "engine/engine.h"
#include "support/check.h"
#include "tensor/error.h"

BOOST_AUTO_TEST_SUITE(test_config)

using namespace triad;
using nlohmann::json;

namespace {

json base() {
  return json::parse(R"({
    "model": {"n_layer": 2, "n_head": 2, "d_model": 16, "seq_len": 32, "vocab_size": 100},
    "train_batch_size": 8, "train_micro_batch_size_per_gpu": 4, "steps": 10,
    "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "betas": [0.9, 0.95]}}
  })");
}

// The message of the Error that parse_config throws for `config`.
std::string error_of(const json& config, int64_t dp = 1) {
  try {
    engine::parse_config(config, dp);
  } catch (const Error& e) {
    return e.what();
  }
  BOOST_FAIL("expected an error");
  return "";
}

json with(const std::string& assignment) {
  json j = base();
  engine::apply_override(j, assignment);
  return j;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

BOOST_AUTO_TEST_CASE(a_valid_config_resolves) {
  const engine::TrainConfig c = engine::parse_config(base());
  BOOST_TEST(c.model.n_layer == 2);
  BOOST_TEST(c.model.vocab_size == 100);
  BOOST_TEST(c.gradient_accumulation_steps == 2);
  BOOST_TEST(c.optimizer.beta2 == 0.95);
  BOOST_TEST(c.json["gradient_accumulation_steps"] == 2);
  BOOST_TEST(c.comm_timeout == 600.0);  // PyTorch's NCCL default
  BOOST_TEST(engine::parse_config(with("comm_timeout=0")).comm_timeout == 0.0);
}

BOOST_AUTO_TEST_CASE(batch_sizes_any_two_determine_the_third) {
  json j = base();
  j.erase("train_batch_size");
  j["gradient_accumulation_steps"] = 3;
  BOOST_TEST(engine::parse_config(j, 2).train_batch_size == 24);
  j = base();
  j.erase("train_micro_batch_size_per_gpu");
  j["gradient_accumulation_steps"] = 2;
  BOOST_TEST(engine::parse_config(j, 2).micro_batch_size == 2);
  j = base();
  j.erase("train_micro_batch_size_per_gpu");
  BOOST_TEST(engine::parse_config(j).micro_batch_size == 8);
  BOOST_TEST(engine::parse_config(j).gradient_accumulation_steps == 1);
}

BOOST_AUTO_TEST_CASE(inconsistent_batch_sizes_are_named) {
  const std::string m = error_of(with("gradient_accumulation_steps=3"));
  BOOST_TEST(contains(m, "inconsistent batch sizes"));
  BOOST_TEST(contains(m, "train_batch_size 8"));
  BOOST_TEST(contains(error_of(base(), 3), "not divisible"));
  json none = base();
  none.erase("train_batch_size");
  none.erase("train_micro_batch_size_per_gpu");
  BOOST_TEST(contains(error_of(none), "train_batch_size"));
}

BOOST_AUTO_TEST_CASE(bad_values_name_key_value_and_what_is_allowed) {
  BOOST_TEST(error_of(with("model.n_layer=0")) == "[config] model.n_layer must be an integer in [1, 1024], got 0");
  BOOST_TEST(error_of(with("optimizer.params.lr=\"fast\"")) ==
             "[config] optimizer.params.lr must be a number in [0, 10], got \"fast\"");
  BOOST_TEST(contains(error_of(with("optimizer.type=\"Adagrad\"")), "optimizer.type must be one of \"AdamW\""));
  BOOST_TEST(contains(error_of(with("optimizer.params.betas=[0.9]")), "a list of 2 numbers"));
  BOOST_TEST(contains(error_of(with("model.dropout=true")), "model.dropout must be a number"));
  BOOST_TEST(contains(error_of(with("model.d_model=15")), "multiple of model.n_head"));
  BOOST_TEST(contains(error_of(with("device=\"tpu\"")), "unknown device 'tpu'"));
  BOOST_TEST(contains(error_of(with("model.activation_checkpointing=1")), "true or false"));
  BOOST_TEST(contains(error_of(with("steps=2.5")), "steps must be an integer"));
  BOOST_TEST(contains(error_of(with("model=[1]")), "model must be an object"));
  BOOST_TEST(error_of(with("comm_timeout=-1")) == "[config] comm_timeout must be a number >= 0, got -1");
}

BOOST_AUTO_TEST_CASE(zero_and_mixed_precision_keys) {
  json j = with("zero_optimization.stage=3");
  engine::apply_override(j, "bf16.enabled=true");
  const engine::TrainConfig c = engine::parse_config(j);
  BOOST_TEST(c.zero.stage == 3);
  BOOST_TEST(c.zero.stage3_param_persistence_threshold == 100000);
  BOOST_TEST(c.zero.stage3_prefetch_bucket_size == 50000000);
  BOOST_TEST(c.zero.reduce_bucket_size == 500000000);
  BOOST_TEST(engine::parse_config(with("zero_optimization.allgather_bucket_size=2e5")).zero.allgather_bucket_size ==
             200000);
  BOOST_TEST(engine::parse_config(with("zero_optimization.contiguous_gradients=true")).zero.stage == 0);
  BOOST_TEST(contains(error_of(with("zero_optimization.contiguous_gradients=false")),
                      "zero_optimization.contiguous_gradients must be true"));
  BOOST_TEST(contains(error_of(with("zero_optimization.reduce_bucket_size=0")),
                      "zero_optimization.reduce_bucket_size must be an integer"));
  BOOST_TEST((c.precision.dtype == DType::bf16));
  BOOST_TEST(error_of(with("zero_optimization.stage=5")) ==
             "[config] zero_optimization.stage must be an integer in [0, 3], got 5");
  engine::apply_override(j, "fp16.enabled=true");
  BOOST_TEST(contains(error_of(j), "bf16.enabled and fp16.enabled are both true"));
  BOOST_TEST(contains(error_of(with("fp16.initial_scale_power=99")), "fp16.initial_scale_power must be an integer"));
  BOOST_TEST(contains(error_of(with("zero_optimization.reduce_bucket_sise=5")), "unknown key"));
}

// The GPT of base() is 4 layers (embedding, 2 blocks, head); train_batch_size 8 over micro 4 is
// 2 micro-batches per step on one data-parallel rank.
BOOST_AUTO_TEST_CASE(pipeline_keys) {
  const engine::TrainConfig one = engine::parse_config(base());
  BOOST_TEST(one.pipeline.stages == 1);
  BOOST_TEST(one.pipeline.partition == "parameters");
  BOOST_TEST(one.pipeline.schedule == "1f1b");
  json j = with("pipeline.stages=2");
  engine::apply_override(j, "pipeline.schedule=\"zb_h1\"");
  BOOST_TEST(engine::parse_config(j, 2).data_parallel == 1);
  BOOST_TEST(contains(error_of(with("pipeline.partition=\"balanced\"")), "pipeline.partition must be"));
  BOOST_TEST(contains(error_of(with("pipeline.partition=\"type:Conv\"")), "matches none of the model's layer types"));
  BOOST_TEST(contains(error_of(with("pipeline.stages=5"), 5), "exceeds the model's 4 layers"));
  BOOST_TEST(contains(error_of(with("pipeline.stages=2"), 3), "does not divide"));
  json interleaved = with("pipeline.stages=2");
  engine::apply_override(interleaved, "pipeline.virtual_stages=2");
  BOOST_TEST(contains(error_of(interleaved, 2), "unless pipeline.schedule is \"interleaved\""));
  engine::apply_override(interleaved, "pipeline.schedule=\"interleaved\"");
  BOOST_TEST(engine::parse_config(interleaved, 2).pipeline.virtual_stages == 2);
  engine::apply_override(interleaved, "train_batch_size=12");
  BOOST_TEST(contains(error_of(interleaved, 2), "multiple of pipeline.stages"));
  BOOST_TEST(contains(error_of(with("pipeline.seed_layers=true")), "pipeline.seed_layers"));
}

BOOST_AUTO_TEST_CASE(distributed_backend_is_auto_mpi_or_nccl) {
  BOOST_TEST(engine::parse_config(base()).distributed_backend == "auto");
  for (const std::string value : {"auto", "mpi", "nccl"})
    BOOST_TEST(engine::parse_config(with("distributed_backend=" + value)).distributed_backend == value);
  BOOST_TEST(error_of(with("distributed_backend=gloo")) ==
             "[config] distributed_backend must be one of \"auto\", \"mpi\" or \"nccl\", got \"gloo\"");
  BOOST_TEST(contains(error_of(with("distributed_backend=1")), "distributed_backend must be one of"));
}

// auto is NCCL only on a GPU, in a build with NCCL, over more than one rank with a GPU each;
// nccl where it cannot run is an error naming the key and the reason. No GPU is touched: this runs anywhere.
BOOST_AUTO_TEST_CASE(distributed_backend_resolves_by_device_build_and_ranks) {
  using engine::DistributedBackend;
  const auto resolve = [](const std::string& backend, Device device, int ranks, const std::string& shared = "") {
    return engine::resolve_distributed_backend(backend, device, ranks, shared);
  };
  const DistributedBackend on_gpus = cuda::nccl_built() ? DistributedBackend::nccl : DistributedBackend::mpi;
  BOOST_TEST((resolve("auto", Device::cuda(0), 2) == on_gpus));
  BOOST_TEST((resolve("auto", Device::cuda(3), 8) == on_gpus));
  BOOST_TEST((resolve("auto", Device::cuda(0), 1) == DistributedBackend::mpi));
  BOOST_TEST((resolve("auto", Device::cpu(), 4) == DistributedBackend::mpi));
  BOOST_TEST((resolve("mpi", Device::cuda(0), 4) == DistributedBackend::mpi));
  BOOST_TEST((resolve("mpi", Device::cpu(), 4) == DistributedBackend::mpi));
  for (int ranks : {1, 2})
    test::check_error([&] { resolve("nccl", Device::cpu(), ranks); },
                      {"[config] distributed_backend \"nccl\": the device is cpu", "NCCL communicates between GPUs"});
  if (cuda::nccl_built()) {
    BOOST_TEST((resolve("nccl", Device::cuda(0), 1) == DistributedBackend::nccl));  // a communicator of one
    BOOST_TEST((resolve("nccl", Device::cuda(1), 2) == DistributedBackend::nccl));
  } else {
    test::check_error([&] { resolve("nccl", Device::cuda(0), 2); },
                      {"[config] distributed_backend \"nccl\": ", "no NCCL communicator"});
  }
  test::check_error([&] { resolve("gloo", Device::cpu(), 2); }, {"[config] distributed_backend must be one of"});
  // Ranks sharing a GPU: auto falls back to MPI, nccl is an error that says which ranks.
  const std::string shared = "ranks 0 and 1 both train on cuda:0 of one node";
  BOOST_TEST((resolve("auto", Device::cuda(0), 2, shared) == DistributedBackend::mpi));
  BOOST_TEST((resolve("mpi", Device::cuda(0), 2, shared) == DistributedBackend::mpi));
  if (cuda::nccl_built())
    test::check_error([&] { resolve("nccl", Device::cuda(0), 2, shared); },
                      {"[config] distributed_backend \"nccl\": " + shared, "NCCL needs a GPU per rank"});
}

BOOST_AUTO_TEST_CASE(llama_keys) {
  json j = base();
  j["model"] = {{"arch", "llama"},     {"n_layer", 3},         {"n_head", 8},         {"n_kv_head", 2},
                {"d_model", 32},       {"intermediate_size", 88}, {"seq_len", 32},    {"vocab_size", 100},
                {"rms_norm_eps", 1e-6}, {"rope_theta", 5e5}};
  const engine::TrainConfig c = engine::parse_config(j);
  BOOST_TEST(c.arch == "llama");
  BOOST_TEST(c.llama.n_layer == 3);
  BOOST_TEST(c.llama.n_head == 8);
  BOOST_TEST(c.llama.n_kv_head == 2);
  BOOST_TEST(c.llama.intermediate == 88);
  BOOST_TEST(c.llama.rms_eps == 1e-6);
  BOOST_TEST(c.llama.rope_theta == 5e5);
  BOOST_TEST(c.llama.init_seed == c.seed);
  j["model"].erase("n_kv_head");  // Hugging Face's default: as many key/value heads as heads
  BOOST_TEST(engine::parse_config(j).llama.n_kv_head == 8);

  // GPT-only keys are unknown to arch llama, and Llama keys to arch gpt2.
  json k = j;
  k["model"]["dropout"] = 0.1;
  BOOST_TEST(contains(error_of(k), "unknown key model.dropout"));
  BOOST_TEST(contains(error_of(with("model.n_kv_head=1")), "unknown key model.n_kv_head"));
  k = j;
  k["model"]["n_kv_head"] = 3;
  BOOST_TEST(error_of(k) == "[config] model.n_kv_head (3) must divide model.n_head (8)");
  k["model"]["n_kv_head"] = 2;
  k["model"]["tensor_parallel"] = 4;
  BOOST_TEST(error_of(k, 4) == "[config] model.tensor_parallel 4 must divide model.n_kv_head (2)");
  k["model"]["n_kv_head"] = 4;
  k["model"]["intermediate_size"] = 90;
  BOOST_TEST(error_of(k, 4) == "[config] model.tensor_parallel 4 must divide model.intermediate_size (90)");
  k["model"]["d_model"] = 40;  // heads of 5 features
  k["model"]["intermediate_size"] = 88;
  k["model"]["tensor_parallel"] = 1;
  BOOST_TEST(error_of(k) == "[config] model.d_model / model.n_head (5) must be even for rotary positions");
  BOOST_TEST(error_of(with("model.arch=gpt3")).find("model.arch") != std::string::npos);
}

// Sequence parallelism splits each sequence over the tensor-parallel ranks: it needs more
// than one, and the sequence must divide among them.
BOOST_AUTO_TEST_CASE(sequence_parallelism_needs_tensor_parallel_ranks) {
  BOOST_TEST(error_of(with("model.sequence_parallel=true")) ==
             "[config] model.sequence_parallel needs model.tensor_parallel > 1 (it splits each sequence over the "
             "tensor-parallel ranks), got model.tensor_parallel 1");
  json j = with("model.sequence_parallel=true");
  j["model"]["tensor_parallel"] = 2;
  BOOST_TEST(engine::parse_config(j, 2).sequence_parallel);
  j["model"]["seq_len"] = 33;
  BOOST_TEST(error_of(j, 2) ==
             "[config] model.sequence_parallel: model.seq_len (33) must be divisible by model.tensor_parallel (2)");
}

BOOST_AUTO_TEST_CASE(unknown_keys_are_errors_with_a_suggestion) {
  BOOST_TEST(error_of(with("model.n_layers=4")) == "[config] unknown key model.n_layers (did you mean model.n_layer?)");
  BOOST_TEST(error_of(with("gradient_cliping=1.0")) ==
             "[config] unknown key gradient_cliping (did you mean gradient_clipping?)");
  BOOST_TEST(error_of(with("zzz=1")) == "[config] unknown key zzz");
  BOOST_TEST(contains(error_of(with("optimizer.params.momentum=0.9")), "unknown key optimizer.params.momentum"));
}

BOOST_AUTO_TEST_CASE(overrides_parse_json_or_strings_and_create_objects) {
  json j = base();
  engine::apply_override(j, "optimizer.params.lr=0.01");
  engine::apply_override(j, "data.corpus=tokens.bin");
  engine::apply_override(j, "scheduler.type=WarmupCosineLR");
  engine::apply_override(j, "scheduler.params.warmup_num_steps=2");
  const engine::TrainConfig c = engine::parse_config(j);
  BOOST_TEST(c.optimizer.lr == 0.01);
  BOOST_TEST(c.data.corpus == "tokens.bin");
  BOOST_TEST(c.scheduler.type == "WarmupCosineLR");
  BOOST_TEST(c.scheduler.total_num_steps == 10);  // defaults to the run's steps
  BOOST_CHECK_THROW(engine::apply_override(j, "no_equals_sign"), Error);
  BOOST_CHECK_THROW(engine::apply_override(j, "a..b=1"), Error);
}

BOOST_AUTO_TEST_CASE(config_files_missing_or_malformed) {
  BOOST_CHECK_EXCEPTION(engine::load_config_file("/nonexistent/x.json"), Error,
                        [](const Error& e) { return contains(e.what(), "/nonexistent/x.json"); });
}

// `triad-train --deepspeed ds_config.json`: DeepSpeed's file joined to triad's, objects key
// by key; a key in both files must have one value there (HF's rule), "auto" in either taking
// the other's.
BOOST_AUTO_TEST_CASE(a_deepspeed_file_joins_the_config) {
  const json model = {{"model", {{"n_layer", 1}, {"n_head", 1}, {"d_model", 8}, {"seq_len", 8}, {"vocab_size", 16}}},
                      {"steps", 10},
                      {"optimizer", {{"params", {{"lr", 1e-3}}}}},
                      {"zero_optimization", {{"stage3_prefetch_bucket_size", 1000}}}};
  const json ds = {{"train_batch_size", 8},
                   {"train_micro_batch_size_per_gpu", 2},
                   {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 0.001}}}}},
                   {"scheduler", {{"type", "WarmupLR"}, {"params", {{"warmup_num_steps", 4}}}}},
                   {"zero_optimization", {{"stage", 2}, {"stage3_prefetch_bucket_size", 1e3}}}};
  const json merged = engine::merge_deepspeed_config(model, "model.json", ds, "ds_config.json");
  const engine::TrainConfig c = engine::parse_config(merged, 2);
  BOOST_TEST(c.zero.stage == 2);
  BOOST_TEST(c.zero.stage3_prefetch_bucket_size == 1000);  // 1000 and 1e3: the same value
  BOOST_TEST(c.optimizer.lr == 0.001);
  BOOST_TEST(c.gradient_accumulation_steps == 2);  // 8 = 2 x 2 x 2 ranks
  BOOST_TEST(c.scheduler.type == "WarmupLR");
  BOOST_TEST(c.model.n_layer == 1);

  json twice = ds;
  twice["zero_optimization"]["stage3_prefetch_bucket_size"] = 5;
  test::check_error([&] { engine::merge_deepspeed_config(model, "model.json", twice, "ds_config.json"); },
                    {"zero_optimization.stage3_prefetch_bucket_size", "1000 in 'model.json'", "5 in 'ds_config.json'"});
  twice = ds;
  twice["optimizer"]["params"] = {{"lr", 3e-4}};
  test::check_error([&] { engine::merge_deepspeed_config(model, "model.json", twice, "ds_config.json"); },
                    {"optimizer.params.lr", "0.001 in 'model.json'", "0.0003 in 'ds_config.json'"});
  twice = ds;
  twice["zero_optimization"] = 2;
  test::check_error([&] { engine::merge_deepspeed_config(model, "model.json", twice, "ds_config.json"); },
                    {"zero_optimization", "{\"stage3_prefetch_bucket_size\":1000} in 'model.json'", "2 in"});
  // "auto" in the DeepSpeed file takes triad's value; triad's "auto" takes DeepSpeed's.
  json hf = ds;
  hf["optimizer"]["params"]["lr"] = "auto";
  hf["zero_optimization"]["stage3_prefetch_bucket_size"] = "auto";
  json model_auto = model;
  model_auto["zero_optimization"]["stage"] = "auto";
  const json joined = engine::merge_deepspeed_config(model_auto, "model.json", hf, "ds_config.json");
  BOOST_TEST(joined["optimizer"]["params"]["lr"] == 1e-3);
  BOOST_TEST(joined["zero_optimization"]["stage3_prefetch_bucket_size"] == 1000);
  BOOST_TEST(joined["zero_optimization"]["stage"] == 2);
}

// HF Trainer's "auto" left after the join: filled in from the config and the model as HF's
// integration fills it, or a named error where nothing gives the value.
BOOST_AUTO_TEST_CASE(hf_trainer_auto_values) {
  json j = {{"model", {{"n_layer", 1}, {"n_head", 2}, {"d_model", 24}, {"seq_len", 8}, {"vocab_size", 16}}},
            {"steps", 30},
            {"train_batch_size", "auto"},
            {"train_micro_batch_size_per_gpu", 3},
            {"gradient_accumulation_steps", "auto"},
            {"gradient_clipping", 0.5},
            {"optimizer",
             {{"type", "AdamW"},
              {"params", {{"lr", 2e-3}, {"betas", "auto"}, {"eps", "auto"}, {"weight_decay", "auto"}}}}},
            {"scheduler",
             {{"type", "WarmupDecayLR"},
              {"params",
               {{"warmup_min_lr", "auto"},
                {"warmup_max_lr", "auto"},
                {"warmup_num_steps", 5},
                {"total_num_steps", "auto"}}}}},
            {"fp16", {{"enabled", "auto"}, {"loss_scale", 0}}},
            {"bf16", {{"enabled", "auto"}}},
            {"zero_optimization",
             {{"stage", 3},
              {"reduce_bucket_size", "auto"},
              {"stage3_prefetch_bucket_size", "auto"},
              {"stage3_param_persistence_threshold", "auto"}}}};
  engine::TrainConfig c = engine::parse_config(j, 2);
  BOOST_TEST(c.micro_batch_size == 3);
  BOOST_TEST(c.gradient_accumulation_steps == 1);
  BOOST_TEST(c.train_batch_size == 6);  // 3 x 1 x 2 ranks
  BOOST_TEST(c.optimizer.beta1 == 0.9);
  BOOST_TEST(c.optimizer.beta2 == 0.999);
  BOOST_TEST(c.optimizer.eps == 1e-8);
  BOOST_TEST(c.optimizer.weight_decay == 0.0);
  BOOST_TEST(c.scheduler.warmup_min_lr == 0.0);
  BOOST_TEST(c.scheduler.warmup_max_lr == 2e-3);  // the optimizer's lr
  BOOST_TEST(c.scheduler.total_num_steps == 30);  // the run's steps
  BOOST_TEST((c.precision.dtype == DType::f32));
  BOOST_TEST(c.zero.reduce_bucket_size == 24 * 24);                       // hidden²
  BOOST_TEST(c.zero.stage3_prefetch_bucket_size == 518);                 // floor(0.9 x 576 = 518.4)
  BOOST_TEST(c.zero.stage3_param_persistence_threshold == 10 * 24);      // 10 x hidden
  BOOST_TEST(c.json["zero_optimization"]["reduce_bucket_size"] == 576);  // the run records the values
  BOOST_TEST(c.json["gradient_accumulation_steps"] == 1);

  for (const auto& [key, words] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"optimizer.params.lr", {"learning_rate"}},
           {"gradient_clipping", {"max_grad_norm"}},
           {"scheduler.params.warmup_num_steps", {"warmup_steps"}}}) {
    json bad = j;
    engine::apply_override(bad, key + "=auto");
    test::check_error([&] { engine::parse_config(bad, 2); }, {key, "\"auto\"", "no config gives it"});
    for (const std::string& w : words) test::check_error([&] { engine::parse_config(bad, 2); }, {w});
  }
  json bad = j;
  bad["train_micro_batch_size_per_gpu"] = "auto";
  test::check_error([&] { engine::parse_config(bad, 2); },
                    {"train_batch_size, train_micro_batch_size_per_gpu, gradient_accumulation_steps are \"auto\"",
                     "give train_micro_batch_size_per_gpu"});
  bad = j;
  bad["model"].erase("d_model");
  test::check_error([&] { engine::parse_config(bad, 2); }, {"zero_optimization.reduce_bucket_size", "model.d_model"});
  bad = j;
  bad.erase("steps");
  test::check_error([&] { engine::parse_config(bad, 2); }, {"scheduler.params.total_num_steps", "steps"});
  bad = j;
  bad["optimizer"]["params"].erase("lr");
  test::check_error([&] { engine::parse_config(bad, 2); }, {"scheduler.params.warmup_max_lr", "optimizer.params.lr"});
  bad = j;
  bad["zero_optimization"]["stage"] = "auto";  // not one of HF's: the key's own parser
  test::check_error([&] { engine::parse_config(bad, 2); }, {"zero_optimization.stage", "\"auto\""});
}

// The ZeRO-2 and ZeRO-3 ds_config.json examples of HF's DeepSpeed integration, "auto" and
// all, beside a training config with the model, data and training values (they train in
// tests/apps/check_deepspeed_configs.sh).
BOOST_AUTO_TEST_CASE(hf_trainer_ds_config_examples) {
  const std::string dir = test::data_path("deepspeed_configs/hf_trainer/");
  const json training = engine::load_config_file(dir + "training.json");
  for (const int stage : {2, 3}) {
    const std::string file = dir + "ds_config_zero" + std::to_string(stage) + ".json";
    BOOST_TEST_CONTEXT(file) {
      const engine::TrainConfig c = engine::parse_config(
          engine::merge_deepspeed_config(training, "training.json", engine::load_config_file(file), file), 4);
      BOOST_TEST(c.zero.stage == stage);
      BOOST_TEST(c.micro_batch_size == 2);
      BOOST_TEST(c.gradient_accumulation_steps == 2);
      BOOST_TEST(c.train_batch_size == 16);
      BOOST_TEST(c.optimizer.lr == 0.001);
      BOOST_TEST(c.optimizer.weight_decay == 0.1);
      BOOST_TEST(c.optimizer.beta2 == 0.999);
      BOOST_TEST(c.gradient_clipping == 1.0);
      BOOST_TEST((c.precision.dtype == DType::bf16));  // fp16 "auto": off; the training config's bf16
      BOOST_TEST(c.scheduler.type == "WarmupLR");
      BOOST_TEST(c.scheduler.warmup_min_lr == 0.0);
      BOOST_TEST(c.scheduler.warmup_max_lr == 0.001);
      BOOST_TEST(c.scheduler.warmup_num_steps == 4);
      BOOST_TEST(c.log_interval == 2000);
      BOOST_TEST(c.zero.reduce_bucket_size == (stage == 2 ? 200000000 : 32 * 32));
      if (stage == 3) {
        BOOST_TEST(c.zero.stage3_prefetch_bucket_size == 921);  // floor(0.9 x 1024)
        BOOST_TEST(c.zero.stage3_param_persistence_threshold == 320);
      }
    }
  }
  // The same examples with a value in both files that differs: named with both values.
  json other = training;
  other["zero_optimization"] = {{"allgather_bucket_size", 1000}};
  test::check_error(
      [&] {
        engine::merge_deepspeed_config(other, "training.json",
                                       engine::load_config_file(dir + "ds_config_zero2.json"), "ds_config_zero2.json");
      },
      {"zero_optimization.allgather_bucket_size", "1000 in 'training.json'", "200000000.0 in 'ds_config_zero2.json'"});
}

// DeepSpeed's top-level, optimizer, fp16 and ZeRO keys: implemented, or accepted with a note
// saying why they change nothing, or an error for features triad does not have.
BOOST_AUTO_TEST_CASE(deepspeed_keys_are_implemented_noted_or_refused) {
  json j = {{"model", {{"n_layer", 1}, {"n_head", 1}, {"d_model", 8}, {"seq_len", 8}, {"vocab_size", 16}}},
            {"train_batch_size", 4},
            {"steps", 10},
            {"steps_per_print", 5},
            {"wall_clock_breakdown", true},
            {"zero_allow_untested_optimizer", true},
            {"optimizer", {{"type", "Adam"}, {"params", {{"lr", 1e-3}, {"adam_w_mode", true}, {"torch_adam", true}}}}},
            {"fp16", {{"enabled", true}, {"loss_scale", 512}}},
            {"zero_optimization", {{"stage", 2}, {"reduce_scatter", true}, {"sub_group_size", 1e9}}}};
  engine::TrainConfig c = engine::parse_config(j);
  BOOST_TEST(c.log_interval == 5);
  BOOST_TEST(c.wall_clock_breakdown);
  BOOST_TEST(c.optimizer.type == "AdamW");
  BOOST_TEST(c.precision.static_loss_scale == 512.0);
  BOOST_TEST(c.notices.size() == 4u);  // zero_allow_untested_optimizer, torch_adam, two ZeRO keys
  for (const char* key : {"zero_allow_untested_optimizer", "torch_adam", "reduce_scatter", "sub_group_size"})
    BOOST_TEST(std::any_of(c.notices.begin(), c.notices.end(),
                           [&](const std::string& n) { return n.find(key) != std::string::npos; }),
               key);
  {  // a static loss scale reaches the optimizer: the first step's scale is 512, not 2^16
    json one = j;
    one["train_batch_size"] = 1;
    engine::Engine e(engine::parse_config(one));
    BOOST_TEST(e.zero()->loss_scale() == 512.0);
  }

  json both = j;
  both["log_interval"] = 2;
  test::check_error([&] { engine::parse_config(both); }, {"log_interval", "steps_per_print"});
  BOOST_TEST(c.optimizer.adam_w_mode);
  BOOST_TEST(c.optimizer.bias_correction);
  json l2 = j;
  l2["optimizer"]["params"] = {{"lr", 1e-3}, {"adam_w_mode", false}, {"weight_decay", 0.1}, {"bias_correction", false}};
  c = engine::parse_config(l2);
  BOOST_TEST(!c.optimizer.adam_w_mode);
  BOOST_TEST(!c.optimizer.bias_correction);
  BOOST_TEST(c.optimizer.weight_decay == 0.1);
  l2["optimizer"]["type"] = "AdamW";  // DeepSpeed's AdamW decouples whatever adam_w_mode says, and triad notes it
  c = engine::parse_config(l2);
  BOOST_TEST(c.optimizer.adam_w_mode);
  BOOST_TEST(!c.optimizer.bias_correction);
  BOOST_TEST(std::any_of(c.notices.begin(), c.notices.end(),
                         [](const std::string& n) { return n.find("adam_w_mode") != std::string::npos; }));
  // offload_param: device "cpu" is where a CPU training device keeps the parameters already;
  // from a GPU it keeps the shards in (pinned) host memory, without a notice. Below stage 3 it
  // is an error naming the key. Device "nvme" (stage 3) takes DeepSpeed's keys and defaults.
  json offload = j;
  offload["zero_optimization"]["stage"] = 3;
  offload["zero_optimization"]["offload_param"] = {{"device", "cpu"}, {"pin_memory", true}};
  c = engine::parse_config(offload);
  BOOST_TEST(std::any_of(c.notices.begin(), c.notices.end(), [](const std::string& n) {
    return n.find("zero_optimization.offload_param: on a CPU training device") == 0;
  }));
  BOOST_TEST((c.zero.offload_param.device == zero::OffloadDevice::cpu));
  offload["device"] = "cuda";
  c = engine::parse_config(offload);
  BOOST_TEST((c.zero.offload_param.device == zero::OffloadDevice::cpu));
  BOOST_TEST(c.zero.offload_param.pin_memory);
  BOOST_TEST(std::none_of(c.notices.begin(), c.notices.end(), [](const std::string& n) {
    return n.find("zero_optimization.offload_param") == 0;
  }));
  offload.erase("device");
  offload["zero_optimization"]["stage"] = 2;
  BOOST_TEST(error_of(offload) ==
             "[config] zero_optimization.offload_param: offloading parameters runs at stage 3, not stage 2");
  offload["zero_optimization"]["stage"] = 3;
  offload["zero_optimization"]["offload_param"] = {{"device", "nvme"}, {"nvme_path", "/local_nvme"}};
  c = engine::parse_config(offload);
  const zero::ParamOffloadConfig& p = c.zero.offload_param;
  BOOST_TEST((p.device == zero::OffloadDevice::nvme));
  BOOST_TEST(p.nvme_path == "/local_nvme");
  BOOST_TEST(!p.pin_memory);
  BOOST_TEST(p.buffer_count == 5);
  BOOST_TEST(p.buffer_size == 100000000);
  BOOST_TEST(p.max_in_cpu == 1000000000);
  offload["zero_optimization"]["offload_param"] = {{"device", "nvme"}, {"nvme_path", "/local_nvme"},
                                                   {"pin_memory", true}, {"buffer_count", 3},
                                                   {"buffer_size", 1e6}, {"max_in_cpu", 1e8}};
  c = engine::parse_config(offload);
  BOOST_TEST(c.zero.offload_param.pin_memory);
  BOOST_TEST(c.zero.offload_param.buffer_count == 3);
  BOOST_TEST(c.zero.offload_param.buffer_size == 1000000);
  BOOST_TEST(c.zero.offload_param.max_in_cpu == 100000000);
  offload["zero_optimization"]["offload_param"] = {{"device", "nvme"}};
  BOOST_TEST(error_of(offload) == "[config] zero_optimization.offload_param.nvme_path is required with device "
                                  "\"nvme\" (the folder that holds each rank's parameter swap file)");
  offload["zero_optimization"]["offload_param"] = {{"device", "nvme"}, {"nvme_path", "/local_nvme"}, {"buffer_count", 0}};
  BOOST_TEST(error_of(offload).find("[config] zero_optimization.offload_param.buffer_count") == 0u);
  offload["zero_optimization"]["offload_param"] = {{"device", "nvme"}, {"nvme_path", "/local_nvme"}};
  offload["zero_optimization"]["stage"] = 2;
  BOOST_TEST(error_of(offload) ==
             "[config] zero_optimization.offload_param: offloading parameters runs at stage 3, not stage 2");
  offload["zero_optimization"]["offload_param"] = {{"device", "none"}};
  BOOST_CHECK_NO_THROW(engine::parse_config(offload));
  offload["zero_optimization"]["offload_param"] = {{"pin_memory", true}};  // DeepSpeed's device: "none"
  BOOST_CHECK_NO_THROW(engine::parse_config(offload));
}

// triad's zero_optimization.delayed_update: off with a warm-up of 40 by default; a negative
// warm-up, an unknown key, and a delayed update beside parameter offload are errors naming
// the key.
BOOST_AUTO_TEST_CASE(delayed_update_keys) {
  const engine::TrainConfig plain = engine::parse_config(with("zero_optimization.stage=2"));
  BOOST_TEST(!plain.zero.delayed_update.enabled);
  BOOST_TEST(plain.zero.delayed_update.warmup_steps == 40);
  json j = with("zero_optimization.stage=2");
  j["zero_optimization"]["delayed_update"] = {{"enabled", true}, {"warmup_steps", 5}};
  const engine::TrainConfig c = engine::parse_config(j);
  BOOST_TEST(c.zero.delayed_update.enabled);
  BOOST_TEST(c.zero.delayed_update.warmup_steps == 5);
  j["zero_optimization"]["delayed_update"]["warmup_steps"] = -1;
  BOOST_TEST(error_of(j).find("zero_optimization.delayed_update.warmup_steps") != std::string::npos, error_of(j));
  j["zero_optimization"]["delayed_update"] = {{"enabled", true}, {"warmup", 5}};
  BOOST_TEST(error_of(j).find("zero_optimization.delayed_update.warmup") != std::string::npos, error_of(j));
  j["zero_optimization"]["delayed_update"] = {{"enabled", true}};
  j["zero_optimization"]["stage"] = 3;
  j["zero_optimization"]["offload_param"] = {{"device", "nvme"}, {"nvme_path", "/local_nvme"}};
  BOOST_TEST(error_of(j) == "[config] zero_optimization.delayed_update does not run with offload_param.device "
                            "\"nvme\" (the pending update would hold every parameter shard in memory); turn one of "
                            "them off");
}

// DeepSpeed's offload_optimizer and aio sections, with its defaults; each wrong value is an
// error naming the key.
BOOST_AUTO_TEST_CASE(offload_optimizer_and_aio_keys) {
  const engine::TrainConfig plain = engine::parse_config(with("zero_optimization.stage=2"));
  const zero::OffloadConfig& none = plain.zero.offload_optimizer;
  BOOST_TEST((none.device == zero::OffloadDevice::none));
  BOOST_TEST(none.nvme_path.empty());
  BOOST_TEST(!none.pin_memory);
  BOOST_TEST(none.buffer_count == 4);
  BOOST_TEST(!none.fast_init);
  BOOST_TEST(none.ratio == 1.0);
  BOOST_TEST(!none.pipeline_read);
  BOOST_TEST(!none.pipeline_write);
  BOOST_TEST(plain.zero.sub_group_size == 1000000000);
  const io::AioConfig& aio = plain.zero.aio;
  BOOST_TEST(aio.block_size == 1048576);
  BOOST_TEST(aio.queue_depth == 8);
  BOOST_TEST(aio.intra_op_parallelism == 1);
  BOOST_TEST(!aio.single_submit);
  BOOST_TEST(aio.overlap_events);

  json j = with("zero_optimization.stage=2");
  j["zero_optimization"]["offload_optimizer"] = {{"device", "nvme"},   {"nvme_path", "/local_nvme"},
                                                 {"buffer_count", 2},   {"pipeline_read", true},
                                                 {"pipeline_write", true}, {"pin_memory", true}, {"fast_init", true}};
  j["zero_optimization"]["sub_group_size"] = 1e8;
  j["aio"] = {{"block_size", 262144}, {"queue_depth", 16}, {"thread_count", 2}, {"single_submit", true},
              {"overlap_events", false}, {"use_gds", false}};
  const engine::TrainConfig c = engine::parse_config(j);
  const zero::OffloadConfig& o = c.zero.offload_optimizer;
  BOOST_TEST((o.device == zero::OffloadDevice::nvme));
  BOOST_TEST(o.nvme_path == "/local_nvme");
  BOOST_TEST(o.buffer_count == 2);
  BOOST_TEST((o.pipeline_read && o.pipeline_write && o.pin_memory && o.fast_init));
  BOOST_TEST(c.zero.sub_group_size == 100000000);
  BOOST_TEST(c.zero.aio.block_size == 262144);
  BOOST_TEST(c.zero.aio.queue_depth == 16);
  BOOST_TEST(c.zero.aio.intra_op_parallelism == 2);
  BOOST_TEST((c.zero.aio.single_submit && !c.zero.aio.overlap_events));
  BOOST_TEST(c.notices.size() == 2u);  // pin_memory and fast_init change nothing
  for (const std::string& n : c.notices)
    BOOST_TEST((n.rfind("zero_optimization.offload_optimizer.pin_memory: ", 0) == 0 ||
                n.rfind("zero_optimization.offload_optimizer.fast_init: ", 0) == 0), n);
  BOOST_TEST((engine::parse_config(with("zero_optimization.offload_optimizer=null")).zero.offload_optimizer.device ==
              zero::OffloadDevice::none));
  json cpu = with("zero_optimization.stage=1");
  cpu["zero_optimization"]["offload_optimizer"] = {{"device", "cpu"}};
  BOOST_TEST((engine::parse_config(cpu).zero.offload_optimizer.device == zero::OffloadDevice::cpu));
  // Partial offload (Note [Partial offload]) at any stage that offloads, 0 (nothing
  // offloaded) to 1; sub_group_size then cuts the state the ratio splits: no notice.
  for (double ratio : {0.0, 0.3, 1.0}) {
    cpu["zero_optimization"]["offload_optimizer"]["ratio"] = ratio;
    cpu["zero_optimization"]["sub_group_size"] = 1000;
    const engine::TrainConfig partial = engine::parse_config(cpu);
    BOOST_TEST(partial.zero.offload_optimizer.ratio == ratio);
    BOOST_TEST(partial.notices.size() == (ratio < 1.0 ? 0u : 1u), "ratio " << ratio);
  }

  const auto error_with = [&](const std::string& key, const json& value) {
    json bad = j;
    json* node = &bad;
    for (size_t at = 0, dot; (dot = key.find('.', at)) != std::string::npos; at = dot + 1)
      node = &(*node)[key.substr(at, dot - at)];
    (*node)[key.substr(key.rfind('.') + 1)] = value;
    return error_of(bad);
  };
  BOOST_TEST(error_with("zero_optimization.offload_optimizer.device", "gpu") ==
             "[config] zero_optimization.offload_optimizer.device must be one of \"none\", \"cpu\" or \"nvme\", got "
             "\"gpu\"");
  BOOST_TEST(error_with("zero_optimization.offload_optimizer.buffer_count", -1) ==
             "[config] zero_optimization.offload_optimizer.buffer_count must be an integer >= 1, got -1");
  BOOST_TEST(error_with("zero_optimization.offload_optimizer.nvme_path", nullptr) ==
             "[config] zero_optimization.offload_optimizer.nvme_path is required with device \"nvme\" (the folder "
             "that holds each rank's optimizer state files)");
  BOOST_TEST(error_with("zero_optimization.offload_optimizer.ratio", 0.5) ==
             "[config] zero_optimization.offload_optimizer.ratio below 1 (partial offload) runs with device \"cpu\", "
             "not \"nvme\" (every sub-group's state is in the files), got 0.5");
  BOOST_TEST(error_with("zero_optimization.offload_optimizer.ratio", 2) ==
             "[config] zero_optimization.offload_optimizer.ratio must be a number in [0, 1], got 2");
  BOOST_TEST(error_with("zero_optimization.offload_optimizer.ratio", -0.5) ==
             "[config] zero_optimization.offload_optimizer.ratio must be a number in [0, 1], got -0.5");
  BOOST_TEST(error_with("zero_optimization.offload_optimizer.ratio", "half") ==
             "[config] zero_optimization.offload_optimizer.ratio must be a number in [0, 1], got \"half\"");
  BOOST_TEST(error_with("zero_optimization.offload_optimizer.pipeline", true) ==
             "[config] unknown key zero_optimization.offload_optimizer.pipeline");
  BOOST_TEST(error_with("zero_optimization.stage", 0) ==
             "[config] zero_optimization.offload_optimizer: offloading the optimizer's state runs at stages 1-3, not "
             "stage 0");
  BOOST_TEST(error_with("zero_optimization.sub_group_size", 0) ==
             "[config] zero_optimization.sub_group_size must be an integer >= 1, got 0");
  BOOST_TEST(error_with("aio.use_gds", true) ==
             "[config] aio.use_gds must be false (triad has no GPUDirect Storage: swap files move through host "
             "memory), got true");
  BOOST_TEST(error_with("aio.block_size", 1000) ==
             "[config] aio.block_size must be a positive multiple of 4096 bytes (direct I/O moves whole pages), got "
             "1000");
  BOOST_TEST(error_with("aio.queue_depth", 0) == "[config] aio.queue_depth must be an integer >= 1, got 0");
  BOOST_TEST(error_with("aio.intra_op_parallelism", 2) ==
             "[config] aio.thread_count must be absent when intra_op_parallelism is given (its older name), got 2");
}

BOOST_AUTO_TEST_CASE(gradient_reduction_keys) {
  json j = {{"model", {{"n_layer", 1}, {"n_head", 1}, {"d_model", 8}, {"seq_len", 8}, {"vocab_size", 16}}},
            {"train_batch_size", 4},
            {"steps", 10},
            {"gradient_predivide_factor", 2.0},
            {"prescale_gradients", true},
            {"bf16", {{"enabled", true}}},
            {"communication_data_type", "bf16"},
            {"data_types", {{"grad_accum_dtype", "bf16"}}}};
  engine::TrainConfig c = engine::parse_config(j);
  BOOST_TEST(c.prescale_gradients);
  BOOST_TEST(c.gradient_predivide_factor == 2.0);
  json wide = j;
  wide["communication_data_type"] = "fp32";
  test::check_error([&] { engine::parse_config(wide); }, {"communication_data_type", "\"bf16\"", "bf16.enabled"});
  json accum = j;
  accum["data_types"]["grad_accum_dtype"] = "fp32";
  test::check_error([&] { engine::parse_config(accum); }, {"data_types.grad_accum_dtype", "\"bf16\""});
  json f32 = j;
  f32.erase("bf16"), f32.erase("data_types"), f32["communication_data_type"] = "fp32";
  BOOST_CHECK_NO_THROW(engine::parse_config(f32));
  f32["communication_data_type"] = "int8";
  test::check_error([&] { engine::parse_config(f32); }, {"communication_data_type", "int8"});
  json zero = j;
  zero["gradient_predivide_factor"] = 0.0;
  test::check_error([&] { engine::parse_config(zero); }, {"gradient_predivide_factor"});
  json unknown = j;
  unknown["tensorboard"] = {{"enabled", true}, {"job_nam", "x"}};
  test::check_error([&] { engine::parse_config(unknown); }, {"tensorboard.job_nam", "job_name"});
  json wandb = j;
  wandb["wandb"] = {{"enabled", true}};
  test::check_error([&] { engine::parse_config(wandb); }, {"wandb", "not available"});
}

BOOST_AUTO_TEST_CASE(flops_profiler_keys) {
  json j = {{"model", {{"n_layer", 1}, {"n_head", 1}, {"d_model", 8}, {"seq_len", 8}, {"vocab_size", 16}}},
            {"train_batch_size", 4},
            {"steps", 10},
            {"flops_profiler",
             {{"enabled", true},
              {"profile_step", 3},
              {"module_depth", -1},
              {"top_modules", 2},
              {"detailed", false},
              {"output_file", nullptr},
              {"recompute_fwd_factor", 1.0}}}};
  engine::TrainConfig c = engine::parse_config(j);
  BOOST_TEST(c.flops_profiler.enabled);
  BOOST_TEST(c.flops_profiler.profile_step == 3);
  BOOST_TEST(c.flops_profiler.top_modules == 2);
  BOOST_TEST(!c.flops_profiler.detailed);
  BOOST_TEST(c.flops_profiler.output_file.empty());
  BOOST_TEST(c.flops_profiler.recompute_fwd_factor == 1.0);
  j["flops_profiler"]["output_file"] = "prof.txt";
  BOOST_TEST(engine::parse_config(j).flops_profiler.output_file == "prof.txt");
  j["flops_profiler"]["top_modules"] = 0;
  test::check_error([&] { engine::parse_config(j); }, {"flops_profiler.top_modules", "0"});
}

// compression_training: the weight bits follow DeepSpeed's schedule (nothing before
// schedule_offset, start_bits, then a drop to the next width after quantization_period
// steps, each later drop after twice as long, down to target_bits), groups and modules are
// read, and what triad does not take is refused by the dotted key.
BOOST_AUTO_TEST_CASE(compression_training_schedule_and_refusals) {
  engine::WeightQuantGroup g;
  g.start_bits = 8, g.target_bits = 1, g.quantization_period = 10;
  const std::vector<std::pair<int64_t, int>> expected = {{0, 0},  {4, 0},  {5, 8},  {14, 8}, {15, 4},
                                                         {24, 4}, {25, 2}, {44, 2}, {45, 1}, {1000, 1}};
  for (const auto& [step, bits] : expected)
    BOOST_TEST(engine::scheduled_weight_bits(g, 5, step) == bits, "step " << step);
  g.target_bits = 4;
  BOOST_TEST(engine::scheduled_weight_bits(g, 0, 1000) == 4);
  g.start_bits = g.target_bits = 2;
  BOOST_TEST(engine::scheduled_weight_bits(g, 0, 1000) == 2);
  BOOST_TEST(engine::matches_modules("blocks.0.attn.qkv", {"attn"}));
  BOOST_TEST(engine::matches_modules("blocks.1.mlp.fc", {"*"}));
  BOOST_TEST(!engine::matches_modules("blocks.1.mlp.fc", {"attn", "^mlp"}));

  json j = base();
  j["compression_training"] = json::parse(R"({
    "weight_quantization": {
      "shared_parameters": {"enabled": true, "schedule_offset": 3, "quantize_groups": 2,
                            "quantization_type": "asymmetric", "rounding": "nearest"},
      "different_groups": {"wq1": {"params": {"start_bits": 8, "target_bits": 2, "quantization_period": 4},
                                   "modules": ["attn"]},
                           "wq2": {"params": {"start_bits": 4}}}},
    "activation_quantization": {
      "shared_parameters": {"enabled": true, "schedule_offset": 1},
      "different_groups": {"aq1": {"params": {"bits": 8}, "modules": ["mlp"]}}},
    "layer_reduction": {"enabled": true, "keep_number_layer": 2, "teacher_layer": [1, 3]},
    "sparse_pruning": {"shared_parameters": {"enabled": false}}
  })");
  const engine::CompressionConfig c = engine::parse_config(j).compression;
  BOOST_TEST(c.weights.enabled);
  BOOST_TEST(c.weights.schedule_offset == 3);
  BOOST_TEST(c.weights.quantize_groups == 2);
  BOOST_TEST(!c.weights.symmetric);
  BOOST_TEST_REQUIRE(c.weights.groups.size() == 2u);
  BOOST_TEST(c.weights.groups[0].name == "wq1");
  BOOST_TEST(c.weights.groups[0].target_bits == 2);
  BOOST_TEST(c.weights.groups[0].modules == std::vector<std::string>({"attn"}));
  BOOST_TEST(c.weights.groups[1].target_bits == 4);  // target_bits defaults to start_bits
  BOOST_TEST(c.weights.groups[1].modules == std::vector<std::string>({"*"}));
  BOOST_TEST(c.activations.enabled);
  BOOST_TEST(c.activations.groups.at(0).modules == std::vector<std::string>({"mlp"}));
  BOOST_TEST(c.layer_reduction.teacher_layer == std::vector<int64_t>({1, 3}));

  const auto refused = [](const std::string& assignment, std::vector<std::string> fragments) {
    test::check_error([&] { engine::parse_config(with(assignment)); }, fragments);
  };
  const std::string w = "compression_training.weight_quantization.";
  refused(w + "shared_parameters.rounding=\"stochastic\"",
          {w + "shared_parameters.rounding", "stochastic rounding is not available"});
  refused(w + "different_groups.g.params.start_bits=3", {w + "different_groups.g.params.start_bits", "8, 4, 2 or 1"});
  json up = with(w + "different_groups.g.params.start_bits=4");
  engine::apply_override(up, w + "different_groups.g.params.target_bits=8");
  test::check_error([&] { engine::parse_config(up); },
                    {w + "different_groups.g.params.target_bits", "at most start_bits 4"});
  refused(w + "shared_parameters.quantizer_kernel=true", {"quantizer_kernel"});
  const std::string a = "compression_training.activation_quantization.";
  refused(a + "shared_parameters.quantization_type=\"asymmetric\"", {a + "shared_parameters.quantization_type"});
  refused(a + "shared_parameters.range_calibration=\"static\"", {"range_calibration", "static ranges"});
  refused(a + "different_groups.g.params.bits=4", {a + "different_groups.g.params.bits", "8"});
  for (const std::string pruning : {"sparse_pruning", "row_pruning", "head_pruning", "channel_pruning"})
    refused("compression_training." + pruning + ".shared_parameters.enabled=true",
            {"compression_training." + pruning, "is not available in triad"});
  const std::string l = "compression_training.layer_reduction.";
  json r = with(l + "enabled=true");
  engine::apply_override(r, l + "teacher_layer=[0, 2, 4]");
  test::check_error([&] { engine::parse_config(r); }, {l + "teacher_layer", "one block index", "(2)"});
  r = with(l + "enabled=true");
  engine::apply_override(r, l + "keep_number_layer=3");
  test::check_error([&] { engine::parse_config(r); }, {l + "keep_number_layer", "n_layer 2"});
  refused(l + "module_name_prefix=\"bert.encoder.layer\"", {l + "module_name_prefix", "\"blocks\""});
  refused(l + "teacher_layer=[3, 1]", {l + "teacher_layer", "increasing"});
  BOOST_CHECK_NO_THROW(engine::parse_config(with(w + "shared_parameters.enabled=true")));  // no groups: nothing
}

BOOST_AUTO_TEST_SUITE_END()  // test_config
