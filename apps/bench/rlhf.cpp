#include "bench/rlhf.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "bench/workers.h"
#include "common/report.h"
#include "checkpoint/checkpoint.h"
#include "config/config.h"
#include "config/model_factory.h"
#include "io/triad_tokenizer.h"
#include "nn/gpt.h"
#include "nn/value_model.h"
#include "parallel/runtime.h"
#include "rlhf/models.h"
#include "rlhf/rl_training.h"
#include "triad.h"

namespace triad::bench {

namespace {

using Clock = std::chrono::steady_clock;

// The PPO config of one (ranks, stage) run over the inputs in `work`.
nlohmann::json ppo_json(const RlhfBenchOptions& o, int ranks, int stage) {
  nlohmann::json j = model_config_json(o.model, o.config, o.overrides);
  j["data"] = {{"path", o.work + "/pairs.jsonl"},
               {"tokenizer", o.work + "/tokenizer.json"},
               {"data_split", "0,0,1"},
               {"max_prompt_seq_len", o.prompt},
               {"max_seq_len", o.prompt + o.answer},
               {"val_fraction", 0.0}};
  j["train_batch_size"] = o.batch;
  j["train_micro_batch_size_per_gpu"] = o.batch / ranks;
  j["scheduler"] = {{"type", "constant"}};
  j["log_interval"] = 1 << 20;
  j["zero_optimization"] = {{"stage", stage}};
  j["ppo"] = {{"reward_model", o.work + "/reward.h5"},
              {"steps", o.warmup + o.steps},
              {"max_answer_seq_len", o.answer},
              {"actor", {{"init", o.work + "/actor.h5"}}},
              {"critic", {{"init", o.work + "/reward.h5"}}}};
  return j;
}

// The inputs every worker reads: a byte-level tokenizer, pairs with prompts of o.prompt
// letters (one token each), the actor's and a reward model's initial weights.
void write_inputs(const RlhfBenchOptions& o) {
  io::TriadTokenizer::train("ab", io::TriadTokenizer::kMinVocabSize).save(o.work + "/tokenizer.json");
  std::ofstream pairs(o.work + "/pairs.jsonl");
  Generator g(3);
  for (int64_t i = 0; i < 4 * o.batch; ++i) {
    Tensor letters = Tensor::empty({o.prompt});
    ops::uniform_(letters, 0.0, 25.999, g);
    std::string prompt;
    for (float x : letters.to_vector<float>()) prompt += char('a' + int(x));
    pairs << nlohmann::json{{"prompt", prompt}, {"chosen", " yes"}, {"rejected", " no"}}.dump() << "\n";
  }
  TRIAD_CHECK(pairs.good(), "triad-bench rlhf: cannot write " << o.work << "/pairs.jsonl");
  const nlohmann::json model = model_config_json(o.model, o.config, o.overrides);
  const engine::TrainConfig c = engine::parse_config(model);
  require_gpt2(c, o.config);
  TRIAD_CHECK(c.model.vocab_size >= io::TriadTokenizer::kMinVocabSize,
              "triad-bench rlhf: the model's vocabulary (" << c.model.vocab_size << ") must hold the byte tokenizer's "
                                                           << io::TriadTokenizer::kMinVocabSize << " tokens");
  TRIAD_CHECK(o.prompt + o.answer <= c.model.seq_len, "triad-bench rlhf: --prompt " << o.prompt << " + --answer "
                                                                                    << o.answer << " exceed the model's seq_len "
                                                                                    << c.model.seq_len);
  nn::GPT actor(c.model);
  engine::save_initial_checkpoint(o.work + "/actor.h5", model, actor.named_parameters());
  nn::ValueModel reward(std::make_shared<nn::GPT>(c.model), c.model.d_model, *nn::serial(), 11);
  engine::save_initial_checkpoint(o.work + "/reward.h5", model, reward.named_parameters());
}

void check_ranks_agree(parallel::Communicator& world, const RlhfBenchOptions& o) {
  std::ostringstream s;
  s << o.model << '|' << o.config << '|' << o.batch << '|' << o.prompt << '|' << o.answer << '|' << o.steps << '|'
    << o.warmup << '|' << o.stage << '|' << o.threads << '|' << o.work;
  for (const std::string& x : o.overrides) s << '|' << x;
  bench::check_ranks_agree(world, s.str(), "rlhf");
}

// The median over the timed steps of a metric of train_rl's JSON lines.
double median_of(const std::vector<nlohmann::json>& rows, const char* key) {
  std::vector<double> v;
  for (const nlohmann::json& r : rows) v.push_back(r.at(key).get<double>());
  return app::median(v);
}

// ---------------------------------------------------------------------------------------
// Worker: one (ranks, stage) run under mpirun.

int run_worker(const RlhfBenchOptions& o) {
  TRIAD_CHECK(parallel::launched_by_mpirun(),
              "triad-bench rlhf --worker runs under mpirun; run `triad-bench rlhf` without --worker instead");
  int argc = 0;
  char** argv = nullptr;
  const parallel::CommunicatorPtr world = parallel::init(argc, argv);
  const int n = world->size(), rank = world->rank();
  const int threads = app::set_threads(parallel::threads_per_rank(o.threads));
  check_ranks_agree(*world, o);

  // One PPO run: its per-step metrics in a file of this run's own.
  const std::string metrics = o.work + "/metrics-" + std::to_string(n) + "-" + std::to_string(o.stage) + ".jsonl";
  const rlhf::StepConfig sc = rlhf::parse_rlhf_config(ppo_json(o, n, o.stage), "ppo", n);
  rlhf::train_rl(sc, {.metrics_path = metrics}, world);

  // The actor alone, trained on sequences of the step's length: this rank's rows.
  const std::unique_ptr<engine::Engine> actor =
      rlhf::policy_engine(sc.model, engine::process_grid(sc.model.train, world));
  const int64_t rows = o.batch / n, T = o.prompt + o.answer;
  const Tensor ids = random_token_ids(rows, T + 1, io::TriadTokenizer::kMinVocabSize, uint64_t(17 + rank));
  const Tensor x = ops::to(ops::contiguous(ops::narrow(ids, 1, 0, T)), actor->device());
  const Tensor y = ops::to(ops::contiguous(ops::narrow(ids, 1, 1, T)), actor->device());
  std::vector<double> train_s;
  for (int s = 0; s < o.warmup + o.steps; ++s) {
    world->barrier();
    const auto t0 = Clock::now();
    actor->backward(actor->forward(x, y));
    actor->step();
    train_s.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  train_s = max_over_ranks(*world, train_s);
  if (rank != 0) return 0;

  std::vector<nlohmann::json> steps;
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) steps.push_back(nlohmann::json::parse(line));
  TRIAD_CHECK(int(steps.size()) == o.warmup + o.steps,
              "triad-bench rlhf: " << steps.size() << " PPO steps in " << metrics << ", expected " << o.warmup + o.steps);
  steps.erase(steps.begin(), steps.begin() + o.warmup);
  const double actor_tps = double(o.batch * T) / app::median({train_s.begin() + o.warmup, train_s.end()});
  const double gen_tps = median_of(steps, "generation_tokens_per_s");
  const double gen_s = median_of(steps, "generation_s"), exp_s = median_of(steps, "experience_s"),
               ppo_train_s = median_of(steps, "training_s");
  const double total = gen_s + exp_s + ppo_train_s;
  app::print_json_line({{"ranks", n},
                        {"stage", o.stage},
                        {"threads_per_rank", threads},
                        {"params", engine::model_shape(sc.model.train).parameters},
                        {"generation_tokens_per_s", gen_tps},
                        {"ppo_training_tokens_per_s", median_of(steps, "training_tokens_per_s")},
                        {"actor_training_tokens_per_s", actor_tps},
                        {"generation_vs_training_per_token", actor_tps / gen_tps},
                        {"response_length", median_of(steps, "response_length")},
                        {"step_s", total},
                        {"generation_fraction", gen_s / total},
                        {"experience_fraction", exp_s / total},
                        {"training_fraction", ppo_train_s / total}});
  return 0;
}

// ---------------------------------------------------------------------------------------
// Parent: writes the inputs, launches the workers, reports.

int run_parent(RlhfBenchOptions o) {
  TRIAD_CHECK(!parallel::launched_by_mpirun(), "triad-bench rlhf starts its own workers under mpirun; run it without mpirun");
  TRIAD_CHECK(!o.ranks.empty() && !o.stages.empty(), "triad-bench rlhf: --ranks and --stages need at least one value");
  for (int n : o.ranks) {
    TRIAD_CHECK(n >= 1, "--ranks: rank counts must be at least 1, got " << n);
    TRIAD_CHECK(o.batch % n == 0, "--batch " << o.batch << " is not divisible by " << n << " ranks (--ranks)");
  }
  const WorkerLauncher launcher("rlhf");
  const std::filesystem::path work =
      std::filesystem::temp_directory_path() / ("triad-bench-rlhf-" + std::to_string(::getpid()));
  std::filesystem::create_directories(work);
  o.work = work.string();
  struct Cleanup {
    std::filesystem::path dir;
    ~Cleanup() { std::filesystem::remove_all(dir); }
  } cleanup{work};
  write_inputs(o);
  for (int n : o.ranks)
    for (int s : o.stages) rlhf::parse_rlhf_config(ppo_json(o, n, s), "ppo", n);  // every run's config, first

  std::printf("PPO step: %lld prompts of %lld tokens, answers up to %lld tokens; %d timed steps after %d\n",
              (long long)o.batch, (long long)o.prompt, (long long)o.answer, o.steps, o.warmup);
  std::printf("%5s %5s %14s %14s %14s %10s %22s\n", "ranks", "stage", "gen tok/s", "ppo train tok/s",
              "actor tok/s", "gen/train", "split gen/exp/train %");
  std::fflush(stdout);
  nlohmann::json runs = nlohmann::json::array();
  double worst = 0;
  for (int n : o.ranks)
    for (int s : o.stages) {
      std::vector<std::string> args = {"--stage", std::to_string(s), "--work", o.work, "--model", o.model};
      if (!o.config.empty()) args.insert(args.end(), {"--config", o.config});
      for (const std::string& x : o.overrides) args.insert(args.end(), {"--set", x});
      args.insert(args.end(), {"--batch", std::to_string(o.batch), "--prompt", std::to_string(o.prompt), "--answer",
                               std::to_string(o.answer), "--steps", std::to_string(o.steps), "--warmup",
                               std::to_string(o.warmup), "--threads", std::to_string(o.threads)});
      const nlohmann::json r = launcher.run(n, args, "ranks " + std::to_string(n) + ", stage " + std::to_string(s),
                                            "generation_tokens_per_s");
      const double ratio = r["generation_vs_training_per_token"].get<double>();
      worst = std::max(worst, ratio);
      std::printf("%5d %5d %14.0f %14.0f %14.0f %10.2f %10.0f/%.0f/%.0f\n", n, s, r["generation_tokens_per_s"].get<double>(),
                  r["ppo_training_tokens_per_s"].get<double>(), r["actor_training_tokens_per_s"].get<double>(), ratio,
                  100 * r["generation_fraction"].get<double>(), 100 * r["experience_fraction"].get<double>(),
                  100 * r["training_fraction"].get<double>());
      std::fflush(stdout);
      runs.push_back(r);
    }
  constexpr double kTarget = 2.0;
  std::printf("generation's time per token over the actor's training time per token: at most %.2f (target %.1f): %s\n",
              worst, kTarget, worst <= kTarget ? "met" : "NOT met");
  app::print_json_line({{"bench", "rlhf"},
                        {"batch", o.batch},
                        {"prompt", o.prompt},
                        {"answer", o.answer},
                        {"runs", runs},
                        {"generation_vs_training_per_token_max", worst},
                        {"target", kTarget},
                        {"target_met", worst <= kTarget}});
  return 0;
}

}  // namespace

int run_rlhf_bench(const RlhfBenchOptions& o) { return o.worker ? run_worker(o) : run_parent(o); }

}  // namespace triad::bench
