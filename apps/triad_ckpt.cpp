// triad-ckpt: looks into checkpoints and weights files (engine/checkpoint.h); one process,
// no mpirun needed. PATH may be a file or a checkpoint folder (its `latest`).
//
//   triad-ckpt inspect PATH                    layout, step, every tensor, checksum status
//   triad-ckpt verify PATH                     recomputes every checksum; exit 1 on damage
//   triad-ckpt export PATH --out FILE [--dtype f32|bf16]   consolidated weights only
#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <set>

#include "common/main_guard.h"
#include "engine/checkpoint.h"
#include "engine/checkpoint_dir.h"

namespace {

using namespace triad;

std::string resolve(const std::string& path) {
  if (!std::filesystem::is_directory(path)) return path;
  const std::string latest = engine::latest_checkpoint(path);
  TRIAD_CHECK(!latest.empty(), "'" << path << "' is a folder without a 'latest' checkpoint pointer");
  return latest;
}

int inspect(const std::string& path) {
  const engine::CheckpointSummary s = engine::read_summary(path);
  const std::vector<std::string> failed = engine::failed_checksums(path);
  const std::set<std::string> bad(failed.begin(), failed.end());
  std::printf("%s: triad %s, format version %lld\n", path.c_str(), s.kind.c_str(), (long long)s.format_version);
  if (s.step >= 0) std::printf("step: %lld\n", (long long)s.step);
  std::printf("written by: %s\n", s.layout.dump().c_str());
  if (s.config.contains("model")) std::printf("model: %s\n", s.config["model"].dump().c_str());
  int64_t bytes = 0;
  std::printf("%-52s %-16s %-5s %-18s %s\n", "dataset", "shape", "dtype", "checksum", "status");
  for (const auto& d : s.datasets) {
    bytes += numel(d.shape) * int64_t(element_size(d.dtype));
    std::printf("%-52s %-16s %-5s %016llx %s\n", d.name.c_str(), shape_str(d.shape).c_str(), dtype_name(d.dtype),
                (unsigned long long)d.stored_checksum, bad.count(d.name) ? "BAD" : "ok");
  }
  std::printf("%zu datasets, %.1f MB; %zu fail their checksum\n", s.datasets.size(), double(bytes) / 1e6, bad.size());
  return bad.empty() ? 0 : 1;
}

int verify(const std::string& path) {
  const std::vector<std::string> failed = engine::failed_checksums(path);
  for (const std::string& name : failed) std::printf("BAD %s\n", name.c_str());
  if (failed.empty())
    std::printf("%s: every dataset verifies\n", path.c_str());
  else
    std::printf("%s: %zu datasets fail their checksum\n", path.c_str(), failed.size());
  return failed.empty() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  return app::guarded_main([&] {
    CLI::App cli{"triad-ckpt: inspect, verify and export triad checkpoints"};
    cli.require_subcommand(1);
    std::string path, out, dtype = "f32";
    CLI::App* inspect_cmd = cli.add_subcommand("inspect", "layout, step, tensors and checksum status");
    inspect_cmd->add_option("path", path, "checkpoint file or folder")->required();
    CLI::App* verify_cmd = cli.add_subcommand("verify", "recompute every checksum (exit 1 on damage)");
    verify_cmd->add_option("path", path, "checkpoint file or folder")->required();
    CLI::App* export_cmd = cli.add_subcommand("export", "write the model's weights alone");
    export_cmd->add_option("path", path, "checkpoint file or folder")->required();
    export_cmd->add_option("--out", out, "the weights file to write")->required();
    export_cmd->add_option("--dtype", dtype, "f32 or bf16")
        ->check(CLI::IsMember({"f32", "bf16"}))
        ->capture_default_str();
    CLI11_PARSE(cli, argc, argv);

    path = resolve(path);
    if (*inspect_cmd) return inspect(path);
    if (*verify_cmd) return verify(path);
    engine::export_weights(path, out, dtype == "bf16" ? DType::bf16 : DType::f32);
    std::printf("wrote %s (%s weights of %s)\n", out.c_str(), dtype.c_str(), path.c_str());
    return 0;
  });
}
