#include "bench/workers.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <sstream>
#include <thread>

#include "nn/gpt.h"
#include "triad.h"

extern char** environ;

namespace triad::bench {

namespace {

std::string find_on_path(const std::string& program, const std::string& who) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    if (dir.empty()) continue;
    const std::string candidate = dir + "/" + program;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  throw Error(who + ": `" + program + "` is not on PATH; it launches the workers (install Open MPI)");
}

std::string self_path(const std::string& who) {
  std::error_code ec;
  const std::filesystem::path p = std::filesystem::read_symlink("/proc/self/exe", ec);
  TRIAD_CHECK(!ec, who << ": cannot find its own executable (/proc/self/exe): " << ec.message());
  return p.string();
}

struct Captured {
  int status = 0;      // exit status, or 128 + signal
  std::string output;  // stdout and stderr, interleaved
};

// This process's environment with `env` added (replacing variables of the same names).
std::vector<std::string> environment_with(const std::map<std::string, std::string>& env) {
  std::vector<std::string> out;
  for (char** e = environ; *e; ++e) {
    const std::string entry = *e;
    if (!env.count(entry.substr(0, entry.find('=')))) out.push_back(entry);
  }
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// Starts argv[0] (a path) with its stdout and stderr on the write end of a new pipe;
// returns the child's pid and the pipe's read end.
std::pair<pid_t, int> spawn_piped(std::vector<std::string> argv, const std::map<std::string, std::string>& env,
                                  const std::string& who) {
  std::vector<std::string> env_strings = environment_with(env);
  const std::vector<char*> envp = c_strings(env_strings), args = c_strings(argv);
  int fds[2];
  TRIAD_CHECK(::pipe(fds) == 0, who << ": pipe() failed: " << std::strerror(errno));
  posix_spawn_file_actions_t actions;
  int rc = posix_spawn_file_actions_init(&actions);
  if (rc != 0) {
    ::close(fds[0]), ::close(fds[1]);
    throw Error(who + ": posix_spawn_file_actions_init failed: " + std::strerror(rc));
  }
  rc = posix_spawn_file_actions_addclose(&actions, fds[0]);
  if (rc == 0) rc = posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  if (rc == 0) rc = posix_spawn_file_actions_adddup2(&actions, fds[1], STDERR_FILENO);
  if (rc == 0) rc = posix_spawn_file_actions_addclose(&actions, fds[1]);
  pid_t pid = 0;  // posix_spawn and its helpers return an error number (errno is not set)
  if (rc == 0) rc = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    throw Error(who + ": cannot start " + argv[0] + ": " + std::strerror(rc));
  }
  return {pid, fds[0]};
}

// Reads `fd` to its end, handing each complete line to on_line as it arrives; a failed
// read() ends the reading with its errno in read_error (0 otherwise).
std::string read_all(int fd, const WorkerLauncher::LineHandler& on_line, int& read_error) {
  std::string output;
  size_t line_start = 0;
  char buf[4096];
  read_error = 0;
  for (ssize_t k; (k = ::read(fd, buf, sizeof buf)) != 0;) {
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) {
      read_error = errno;
      break;
    }
    output.append(buf, size_t(k));
    for (size_t nl; (nl = output.find('\n', line_start)) != std::string::npos; line_start = nl + 1)
      if (on_line) on_line(output.substr(line_start, nl - line_start));
  }
  if (on_line && line_start < output.size()) on_line(output.substr(line_start));
  return output;
}

// Runs argv[0] with `env` added to this process's environment; returns its exit status and
// everything it wrote.
Captured run_capture(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
                     const WorkerLauncher::LineHandler& on_line, const std::string& who) {
  const auto [pid, fd] = spawn_piped(argv, env, who);
  Captured c;
  int read_error = 0;
  c.output = read_all(fd, on_line, read_error);
  ::close(fd);  // a child still writing gets SIGPIPE and ends, so waiting cannot hang
  int wstatus = 0;
  while (::waitpid(pid, &wstatus, 0) < 0) {
    TRIAD_CHECK(errno == EINTR, who << ": waitpid() for " << argv[0] << " failed: " << std::strerror(errno));
  }
  TRIAD_CHECK(read_error == 0,
              who << ": reading the output of " << argv[0] << " failed: " << std::strerror(read_error));
  c.status = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + (WIFSIGNALED(wstatus) ? WTERMSIG(wstatus) : 0);
  return c;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream s(text);
  for (std::string line; std::getline(s, line);) out.push_back(line);
  return out;
}

// Each rank's "rank R: error: ..." line, a message repeated by other ranks once.
std::string error_lines(const std::string& output) {
  std::string errors;
  std::vector<std::string> seen;
  for (const std::string& line : lines_of(output)) {
    const size_t at = line.find("error:");
    if (at == std::string::npos) continue;
    const std::string message = line.substr(at);
    if (std::find(seen.begin(), seen.end(), message) != seen.end()) continue;
    seen.push_back(message);
    errors += (errors.empty() ? "" : "\n") + line;
  }
  return errors;
}

}  // namespace

WorkerLauncher::WorkerLauncher(std::string command) : command_(std::move(command)) {
  const std::string who = "triad-bench " + command_;
  mpirun_ = find_on_path("mpirun", who);
  self_ = self_path(who);
}

nlohmann::json WorkerLauncher::run(int ranks, const std::vector<std::string>& args, const std::string& label,
                                   const std::string& result_key, const LineHandler& on_line) const {
  std::vector<std::string> argv = {
      mpirun_, "-np", std::to_string(ranks), "--oversubscribe", "--bind-to", "none", self_, command_, "--worker"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::map<std::string, std::string> env;
  if (::geteuid() == 0) env["OMPI_ALLOW_RUN_AS_ROOT"] = "1", env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1";
  // More ranks than cores: spinning OpenMP waits would steal the cores the other ranks need.
  if (ranks > int(std::thread::hardware_concurrency()) && !std::getenv("OMP_WAIT_POLICY"))
    env["OMP_WAIT_POLICY"] = "PASSIVE";

  const Captured c = run_capture(argv, env, on_line, "triad-bench " + command_);
  nlohmann::json row;
  for (const std::string& line : lines_of(c.output)) {
    if (line.empty() || line[0] != '{') continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.contains(result_key)) row = std::move(j);
  }
  if (c.status == 0 && !row.is_null()) return row;
  std::fprintf(stderr, "---- output of the worker (%s) ----\n%s---- end of worker output ----\n", label.c_str(),
               c.output.c_str());
  std::ostringstream msg;
  msg << "triad-bench " << command_ << ": the worker for " << label << " failed (exit status " << c.status << ")";
  const std::string errors = error_lines(c.output);
  if (!errors.empty())
    msg << ": " << errors;
  else if (c.status == 0)
    msg << ": it printed no result line";
  throw Error(msg.str());
}

Tensor random_token_ids(int64_t rows, int64_t cols, int64_t vocab, uint64_t seed) {
  Generator gen(seed);
  Tensor draws = Tensor::empty({rows, cols}, DType::f32);
  ops::uniform_(draws, 0.0, double(vocab) - 1e-3, gen);
  const std::vector<float> raw = draws.to_vector<float>();
  return Tensor::from_vector(std::vector<int64_t>(raw.begin(), raw.end()), {rows, cols});
}

nlohmann::json preset_config_json(const std::string& preset) {
  const nn::GPTConfig m = nn::GPTConfig::preset(preset);
  return {{"model",
           {{"arch", "gpt2"},
            {"n_layer", m.n_layer},
            {"n_head", m.n_head},
            {"d_model", m.d_model},
            {"seq_len", m.seq_len},
            {"vocab_size", m.vocab_size},
            {"make_vocab_size_divisible_by", m.vocab_multiple},
            {"dropout", m.dropout},
            {"activation_checkpointing", m.activation_checkpointing}}},
          {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 3e-4}, {"betas", {0.9, 0.95}}, {"weight_decay", 0.1}}}}},
          {"gradient_clipping", 1.0},
          {"device", "cpu"}};
}

nlohmann::json model_config_json(const std::string& preset, const std::string& config,
                                 const std::vector<std::string>& overrides) {
  nlohmann::json json = config.empty() ? preset_config_json(preset) : engine::load_config_file(config);
  for (const std::string& s : overrides) engine::apply_override(json, s);
  for (const char* key : {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "steps",
                          "scheduler", "zero_optimization", "output_dir", "checkpoint", "data"})
    json.erase(key);
  json["train_batch_size"] = 1;
  json["steps"] = 1;
  return json;
}

void require_gpt2(const engine::TrainConfig& config, const std::string& path) {
  TRIAD_CHECK(config.arch == "gpt2", "--config '" << path << "': model.arch is \"" << config.arch
                                                  << "\", and triad-bench times arch gpt2 models only");
}

std::vector<double> max_over_ranks(parallel::Communicator& world, const std::vector<double>& v) {
  Tensor t = Tensor::from_vector(v, {int64_t(v.size())});
  world.all_reduce(t, parallel::ReduceOp::max)->wait();
  return t.to_vector<double>();
}

void check_ranks_agree(parallel::Communicator& world, const std::string& options, const std::string& command) {
  const uint64_t h = std::hash<std::string>{}(options);
  const double lo = double(h & 0xffffffffu), hi = double(h >> 32);
  const std::vector<double> mx = max_over_ranks(world, {lo, hi, -lo, -hi});
  TRIAD_CHECK(mx[0] == -mx[2] && mx[1] == -mx[3], "triad-bench " << command
                                                                 << " --worker: the ranks were started with different "
                                                                    "options; start them all alike");
}

int run_program(const std::vector<std::string>& argv, const std::string& dir, bool quiet) {
  std::vector<std::string> copy = argv;
  std::vector<char*> args;
  for (std::string& s : copy) args.push_back(s.data());
  args.push_back(nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = ::fork();
  TRIAD_CHECK(pid >= 0, "triad-bench: fork() failed: " << std::strerror(errno));
  if (pid == 0) {
    if (quiet) {
      FILE* null = std::fopen("/dev/null", "w");
      if (null) ::dup2(::fileno(null), STDOUT_FILENO), ::dup2(::fileno(null), STDERR_FILENO);
    }
    if (!dir.empty() && ::chdir(dir.c_str()) != 0) ::_exit(127);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    TRIAD_CHECK(errno == EINTR, "triad-bench: waitpid() failed: " << std::strerror(errno));
  }
  if (!WIFEXITED(status)) return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  return WEXITSTATUS(status) == 127 ? -1 : WEXITSTATUS(status);
}


}  // namespace triad::bench
