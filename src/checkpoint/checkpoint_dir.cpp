#include "checkpoint/checkpoint_dir.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>

#include "checkpoint/checkpoint.h"
#include "io/atomic_file.h"

namespace triad::engine {

namespace fs = std::filesystem;

namespace {

const std::regex kCheckpointName(R"(step-(\d+)\.h5)");
const std::regex kInterruptedSave(R"(step-\d+\.h5\.tmp)");

// Runs `action` on rank 0 and makes its failure every rank's failure (one Error each).
template <typename Action>
void on_leader(parallel::Communicator& world, const char* what, Action action) {
  std::string error;
  if (world.rank() == 0) {
    try {
      action();
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  Tensor failed = Tensor::full({1}, error.empty() ? 0.0 : 1.0, DType::f32);
  world.all_reduce(failed, parallel::ReduceOp::max)->wait();
  TRIAD_CHECK(error.empty(), error);
  TRIAD_CHECK(failed.item() == 0.0, "[checkpoint] " << what << " failed on rank 0 (its message says why)");
}

// rank 0's string on every rank.
std::string broadcast_string(const std::string& s, parallel::Communicator& world) {
  Tensor size = Tensor::from_vector(std::vector<int64_t>{int64_t(s.size())}, {1});
  world.broadcast(size, 0)->wait();
  Tensor bytes = Tensor::zeros({int64_t(size.item())}, DType::i8);
  if (world.rank() == 0) std::copy(s.begin(), s.end(), reinterpret_cast<char*>(bytes.data<int8_t>()));
  if (bytes.numel() > 0) world.broadcast(bytes, 0)->wait();
  const char* p = reinterpret_cast<const char*>(bytes.data<int8_t>());
  return std::string(p, p + bytes.numel());
}

}  // namespace

std::string checkpoint_file_name(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%08lld.h5", (long long)step);
  return name;
}

void create_folder(const std::string& dir, parallel::Communicator& world) {
  on_leader(world, "creating a folder", [&] {
    std::error_code ec;
    fs::create_directories(dir, ec);
    TRIAD_CHECK(!ec, "cannot create the folder '" << dir << "': " << ec.message());
  });
}

void point_latest(const std::string& dir, const std::string& name) {
  const std::string line = name + "\n";
  io::write_file_atomically((fs::path(dir) / "latest").string(), {{line.data(), line.size()}}, "checkpoint pointer");
}

std::string save_to_dir(const std::string& dir, int64_t keep, Engine& engine, parallel::Communicator& world) {
  create_folder(dir, world);
  const std::string name = checkpoint_file_name(engine.global_step());
  const std::string path = (fs::path(dir) / name).string();
  save_checkpoint(path, engine, world);
  on_leader(world, "updating latest", [&] {
    point_latest(dir, name);
    // What saves killed midway left behind (no other save runs now).
    for (const auto& entry : fs::directory_iterator(dir))
      if (std::regex_match(entry.path().filename().string(), kInterruptedSave)) fs::remove(entry.path());
    if (keep <= 0) return;
    const std::vector<std::string> all = checkpoints_newest_first(dir);
    for (size_t i = size_t(keep); i < all.size(); ++i)
      if (all[i] != path) fs::remove(all[i]);
  });
  return path;
}

std::string latest_checkpoint(const std::string& dir) {
  const fs::path pointer = fs::path(dir) / "latest";
  if (!fs::exists(pointer)) return "";
  std::ifstream in(pointer);
  std::string name;
  std::getline(in, name);
  TRIAD_CHECK(in || in.eof(), "cannot read '" << pointer.string() << "'");
  const fs::path target = fs::path(dir) / name;
  TRIAD_CHECK(!name.empty() && fs::is_regular_file(target),
              "'" << pointer.string() << "' names checkpoint '" << name << "', which does not exist");
  return target.string();
}

std::vector<std::string> checkpoints_newest_first(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::smatch m;
    const std::string name = entry.path().filename().string();
    if (entry.is_regular_file() && std::regex_match(name, m, kCheckpointName))
      found.emplace_back(std::stoll(m[1].str()), entry.path().string());
  }
  std::sort(found.rbegin(), found.rend());
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

std::string resume(const std::string& spec, const std::string& dir, Engine& engine, parallel::Communicator& world) {
  const bool leader = world.rank() == 0;
  if (spec != "auto") {
    std::string path = spec;
    if (fs::is_directory(spec)) {
      path = latest_checkpoint(spec);
      TRIAD_CHECK(!path.empty(), "--resume " << spec << ": the folder has no 'latest' checkpoint pointer");
    }
    load_checkpoint(path, engine, world);
    return path;
  }
  TRIAD_CHECK(!dir.empty(), "--resume auto needs a checkpoint folder: set checkpoint.dir or --save-dir");
  // Rank 0 lists the candidates, so every rank tries the same files in the same order.
  std::string listing;
  if (leader) {
    nlohmann::json candidates = nlohmann::json::array();
    try {
      const std::string latest = latest_checkpoint(dir);
      if (!latest.empty()) candidates.push_back(latest);
    } catch (const Error& e) {
      std::printf("warning: %s; looking for other checkpoints in %s\n", e.what(), dir.c_str());
    }
    for (const std::string& p : checkpoints_newest_first(dir))
      if (std::find(candidates.begin(), candidates.end(), p) == candidates.end()) candidates.push_back(p);
    listing = candidates.dump();
  }
  const nlohmann::json candidates = nlohmann::json::parse(broadcast_string(listing, world));
  if (candidates.empty()) {
    if (leader) std::printf("no checkpoint in %s: starting from step 0\n", dir.c_str());
    return "";
  }
  std::string failures;
  for (const auto& c : candidates) {
    const std::string path = c.get<std::string>();
    try {
      load_checkpoint(path, engine, world);
      if (leader && !failures.empty())
        std::printf("resuming from %s, the newest checkpoint that loads\n", path.c_str());
      return path;
    } catch (const Error& e) {
      if (leader) std::printf("warning: cannot resume from %s: %s\n", path.c_str(), e.what());
      failures += std::string(failures.empty() ? "" : "; ") + e.what();
    }
  }
  TRIAD_CHECK(false, "--resume auto: no checkpoint in " << dir << " loads (" << failures << ")");
}

}  // namespace triad::engine
