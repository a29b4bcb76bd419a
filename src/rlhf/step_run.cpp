#include "rlhf/step_run.h"

#include <cstdio>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_dir.h"
#include "parallel/self_communicator.h"
#include "parallel/tensor_parallel_functions.h"
#include "tensor/ops.h"

namespace triad::rlhf {

int64_t column_multiple(const engine::TrainConfig& c) { return c.sequence_parallel ? c.tensor_parallel : 1; }

int64_t pair_column_multiple(const engine::TrainConfig& c, const SequenceLimits& limits) {
  if (c.pipeline.stages == 1) return column_multiple(c);
  TRIAD_CHECK(limits.max_seq_len % column_multiple(c) == 0,
              "[config] data.max_seq_len " << limits.max_seq_len << " must be a multiple of model.tensor_parallel "
                                           << c.tensor_parallel << " with sequence parallelism in pipeline stages "
                                           << "(every batch has data.max_seq_len columns)");
  return limits.max_seq_len;
}

std::vector<Tensor> index_targets(size_t micro_batches) {
  std::vector<Tensor> targets;
  for (size_t m = 0; m < micro_batches; ++m) targets.push_back(Tensor::from_vector(std::vector<int64_t>{int64_t(m)}, {1}));
  return targets;
}

size_t target_index(const Tensor& target) { return size_t(ops::to(target, Device::cpu()).to_vector<int64_t>()[0]); }

std::vector<std::vector<double>> last_stage_rows(const std::vector<std::vector<double>>& rows, int64_t width,
                                                 parallel::Communicator& pp) {
  const int64_t m = int64_t(rows.size());
  std::vector<double> flat(size_t(m * width), 0.0);
  if (pp.rank() == pp.size() - 1)
    for (int64_t i = 0; i < m; ++i) {
      TRIAD_ASSERT_MSG(int64_t(rows[size_t(i)].size()) == width, "last_stage_rows: row " << i << " has "
                                                                   << rows[size_t(i)].size() << " figures, not "
                                                                   << width);
      std::copy(rows[size_t(i)].begin(), rows[size_t(i)].end(), flat.begin() + i * width);
    }
  Tensor t = Tensor::from_vector(flat, {m * width});
  if (pp.size() > 1) pp.broadcast(t, pp.size() - 1)->wait();
  const std::vector<double> v = t.to_vector<double>();
  std::vector<std::vector<double>> out;
  for (int64_t i = 0; i < m; ++i) out.emplace_back(v.begin() + i * width, v.begin() + (i + 1) * width);
  return out;
}

StepLayout step_layout(const engine::TrainConfig& c, parallel::CommunicatorPtr world, const std::string& step) {
  StepLayout l;
  l.world = world ? world : std::make_shared<parallel::SelfCommunicator>();
  l.grid = engine::process_grid(c, l.world);
  l.dp = l.grid->dp(), l.tp = l.grid->tp();
  l.rank = l.dp->rank(), l.ranks = l.dp->size();
  l.leader = l.world->rank() == 0;
  TRIAD_CHECK(c.train_batch_size == c.micro_batch_size * c.gradient_accumulation_steps * l.ranks,
              "[config] " << step << ": train_batch_size " << c.train_batch_size << " != train_micro_batch_size_per_gpu "
                          << c.micro_batch_size << " x gradient_accumulation_steps " << c.gradient_accumulation_steps
                          << " x data-parallel ranks " << l.ranks);
  return l;
}

void check_on_every_rank(const std::function<void()>& checks, const parallel::CommunicatorPtr& world) {
  if (!world) return checks();
  double failed = 0;
  try {
    checks();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: error: %s\n", world->rank(), e.what());
    std::fflush(stderr);
    failed = 1;
  }
  if (sum_over(world, {failed})[0] > 0) throw ChecksFailed();
}

Tensor full_vocabulary(const Tensor& logits, const parallel::CommunicatorPtr& tp) {
  return tp && tp->size() > 1 ? parallel::gather_from_tp_region(logits, tp) : logits;
}

std::vector<double> sum_over(const parallel::CommunicatorPtr& comm, std::vector<double> values) {
  if (!comm || comm->size() == 1 || values.empty()) return values;
  Tensor t = Tensor::from_vector(values, {int64_t(values.size())});
  comm->all_reduce(t)->wait();
  return t.to_vector<double>();
}

nlohmann::json model_memory(const std::vector<std::pair<std::string, zero::ResidentBytes>>& models,
                            const parallel::CommunicatorPtr& world) {
  std::vector<double> v;
  for (const auto& [_, m] : models)
    v.insert(v.end(), {double(m.param_bytes), double(m.grad_bytes), double(m.optim_bytes), double(m.host_bytes),
                       double(m.nvme_bytes)});
  if (world && world->size() > 1 && !v.empty()) {
    Tensor t = Tensor::from_vector(v, {int64_t(v.size())});
    world->all_reduce(t, parallel::ReduceOp::max)->wait();
    v = t.to_vector<double>();
  }
  nlohmann::json mem = nlohmann::json::object();
  for (size_t i = 0; i < models.size(); ++i)
    mem[models[i].first] = {{"param_bytes", int64_t(v[5 * i])},
                            {"grad_bytes", int64_t(v[5 * i + 1])},
                            {"optim_bytes", int64_t(v[5 * i + 2])},
                            {"host_bytes", int64_t(v[5 * i + 3])},
                            {"nvme_bytes", int64_t(v[5 * i + 4])}};
  return mem;
}

std::string memory_line(const nlohmann::json& mem) {
  std::string text = "resident per rank (MB of parameters/gradients/optimizer state):";
  char buf[160];
  for (const auto& [name, m] : mem.items()) {
    std::snprintf(buf, sizeof buf, "%s %s %.3g/%.3g/%.3g", text.back() == ':' ? "" : ",", name.c_str(),
                  m.at("param_bytes").get<double>() / 1e6, m.at("grad_bytes").get<double>() / 1e6,
                  m.at("optim_bytes").get<double>() / 1e6);
    text += buf;
    const double host = m.value("host_bytes", 0.0), nvme = m.value("nvme_bytes", 0.0);
    if (host > 0 || nvme > 0) {
      std::snprintf(buf, sizeof buf, " (host %.3g, nvme %.3g)", host / 1e6, nvme / 1e6);
      text += buf;
    }
  }
  return text;
}

StepLog::StepLog(const std::string& metrics_path, bool leader, int64_t first_step, int64_t steps,
                 int64_t log_interval)
    : leader_(leader),
      first_step_(first_step),
      steps_(steps),
      log_interval_(log_interval),
      start_(std::chrono::steady_clock::now()) {
  if (!leader || metrics_path.empty()) return;
  metrics_.open(metrics_path, first_step > 0 ? std::ios::app : std::ios::trunc);
  TRIAD_CHECK(metrics_.good(), "cannot write the metrics file '" << metrics_path << "'");
}

void StepLog::write(int64_t step, const nlohmann::json& metrics, const std::vector<std::string>& shown) {
  if (!leader_) return;
  if (metrics_.is_open()) {
    nlohmann::json line = metrics;
    line["step"] = step;
    metrics_ << line.dump() << "\n";
    metrics_.flush();
  }
  if (step % log_interval_ != 0 && step != steps_) return;
  std::string text = "step " + std::to_string(step) + "/" + std::to_string(steps_);
  char buf[64];
  for (const std::string& key : shown) {
    std::snprintf(buf, sizeof buf, " | %s %.4g", key.c_str(), metrics.at(key).get<double>());
    text += buf;
  }
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  std::snprintf(buf, sizeof buf, " | %.0f s, ETA %.0f s", elapsed,
                elapsed / double(step - first_step_) * double(steps_ - step));
  print(text + buf);
}

void StepLog::print(const std::string& line) const {
  if (!leader_) return;
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

int64_t resume_engine(const std::string& spec, engine::Engine& engine, parallel::Communicator& world,
                      const std::string& what) {
  const engine::TrainConfig& c = engine.config();
  if (spec.empty()) return 0;
  const std::string from = engine::resume(spec, c.checkpoint.dir, engine, world);
  if (!from.empty() && world.rank() == 0)
    std::printf("resumed %s from %s at step %lld\n", what.c_str(), from.c_str(), (long long)engine.global_step());
  TRIAD_CHECK(engine.global_step() <= c.steps,
              what << ": the checkpoint is at step " << engine.global_step() << ", beyond the run's steps " << c.steps);
  return engine.global_step();
}

bool maybe_checkpoint(engine::Engine& engine, parallel::Communicator& world, int64_t step, const StepLog& log) {
  const engine::TrainConfig& c = engine.config();
  if (c.checkpoint.dir.empty()) return false;
  if (!((c.checkpoint.every > 0 && step % c.checkpoint.every == 0) || step == c.steps)) return false;
  log.print("step " + std::to_string(step) + " | saved " +
            engine::save_to_dir(c.checkpoint.dir, c.checkpoint.keep, engine, world));
  return true;
}

void save_output(engine::Engine& engine, parallel::Communicator& world, const std::string& name, const StepLog& log) {
  const engine::TrainConfig& c = engine.config();
  if (c.output_dir.empty()) return;
  engine::create_folder(c.output_dir, world);
  const std::string path = c.output_dir + "/" + name + ".h5";
  engine::save_weights(path, engine, world, DType::f32);
  log.print("saved " + path);
}

}  // namespace triad::rlhf
