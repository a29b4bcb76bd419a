// triad-ckpt: looks into checkpoints and weights files (checkpoint/checkpoint.h), and converts
// Hugging Face safetensors checkpoints (checkpoint/hf_checkpoint.h); one process, no mpirun
// needed. PATH may be a file or a checkpoint folder (its `latest`).
//
//   triad-ckpt inspect PATH                    layout, step, every tensor, checksum status
//                                              (and a quantized model's recipe and bits,
//                                              and the bytes it holds in memory)
//   triad-ckpt verify PATH                     recomputes every checksum; exit 1 on damage
//   triad-ckpt export PATH --out FILE [--dtype f32|bf16]   consolidated weights only
//   triad-ckpt export PATH --format safetensors --out DIR [--dtype f32|f16|bf16|f64]
//                     [--max-shard-size 5GB]   a folder transformers loads (gpt2, llama, mixtral):
//                                              weights in HF's names, config.json,
//                                              generation_config.json, tokenizer files
//   triad-ckpt import --from model.safetensors|DIR [--arch gpt2|llama|mixtral] --out DIR
//                     [--n-head N] [--seq-len T] [--rope-theta X] [--rms-eps X]
//                                              a new checkpoint folder (step 0) to train
//                                              from (triad-train --resume DIR) or sample
//                                              from (triad-generate), with the tokenizer
//                                              files found beside the model
#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <set>

#include "common/main_guard.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/hf_checkpoint.h"
#include "checkpoint/quantized_model.h"
#include "io/hf_tokenizer.h"

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
  if (!s.recipe.is_null()) {
    const int64_t group = s.recipe.value("group_size", int64_t(0));
    std::printf("quantized: %s, W%dA%d, %s (%s)\n", s.recipe.value("method", "").c_str(), s.recipe.value("wbits", 0),
                s.recipe.value("abits", 0),
                group > 0 ? ("groups of " + std::to_string(group)).c_str() : "a scale per row",
                s.recipe.value("symmetric", true) ? "symmetric" : "asymmetric");
    if (s.recipe.value("quantize_embeddings", false))
      std::printf("quantized embeddings: the token table(s) and the output head\n");
    const int64_t lkd_steps = s.recipe.value("lkd_steps", int64_t(0));
    if (lkd_steps > 0) std::printf("layer-by-layer distillation: %lld steps per block\n", (long long)lkd_steps);
    if (s.recipe.value("method", "") == "xtc")
      std::printf("xtc: %lld steps of distillation; kept blocks %s of the teacher's %lld\n",
                  (long long)s.recipe.value("steps", int64_t(0)),
                  s.recipe.value("keep_layers", nlohmann::json::array()).dump().c_str(),
                  (long long)s.recipe.value("teacher_layers", int64_t(0)));
  }
  int64_t bytes = 0;
  std::printf("%-52s %-16s %-5s %-18s %s\n", "dataset", "shape", "dtype", "checksum", "status");
  for (const auto& d : s.datasets) {
    bytes += numel(d.shape) * int64_t(element_size(d.dtype));
    std::printf("%-52s %-16s %-5s %016llx %s\n", d.name.c_str(), shape_str(d.shape).c_str(), dtype_name(d.dtype),
                (unsigned long long)d.stored_checksum, bad.count(d.name) ? "BAD" : "ok");
  }
  std::printf("%zu datasets, %.1f MB; %zu fail their checksum\n", s.datasets.size(), double(bytes) / 1e6, bad.size());
  if (!s.recipe.is_null() && bad.empty()) {
    const engine::ModelBytes b = engine::model_bytes(engine::load_model(path).model);
    std::printf(
        "in memory: %lld bytes, %lld in full precision (%.2fx); quantized layers %lld bytes, %lld in f32 "
        "(%.2fx)\n",
        (long long)b.resident, (long long)b.full_precision, double(b.full_precision) / double(b.resident),
        (long long)b.packed, (long long)b.packed_f32, double(b.packed_f32) / double(b.packed));
  }
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
    CLI::App cli{"triad-ckpt: inspect, verify, export and import triad checkpoints"};
    cli.require_subcommand(1);
    std::string path, out, dtype = "f32", format = "h5", max_shard_size = "5GB";
    CLI::App* inspect_cmd = cli.add_subcommand("inspect", "layout, step, tensors and checksum status");
    inspect_cmd->add_option("path", path, "checkpoint file or folder")->required();
    CLI::App* verify_cmd = cli.add_subcommand("verify", "recompute every checksum (exit 1 on damage)");
    verify_cmd->add_option("path", path, "checkpoint file or folder")->required();
    CLI::App* export_cmd = cli.add_subcommand("export", "write the model's weights alone");
    export_cmd->add_option("path", path, "checkpoint file or folder")->required();
    export_cmd->add_option("--out", out, "h5: the weights file to write; safetensors: the folder to write")->required();
    export_cmd
        ->add_option("--format", format,
                     "h5 (a triad weights file) or safetensors (a Hugging Face model folder: gpt2, llama)")
        ->check(CLI::IsMember({"h5", "safetensors"}))
        ->capture_default_str();
    export_cmd->add_option("--dtype", dtype, "h5: f32 or bf16; safetensors: f32, f16, bf16 or f64")
        ->check(CLI::IsMember({"f32", "bf16", "f16", "f64"}))
        ->capture_default_str();
    export_cmd
        ->add_option("--max-shard-size", max_shard_size,
                     "safetensors: shard the weights above this size, as save_pretrained (5GB, 500MB, 2GiB, bytes)")
        ->capture_default_str();
    engine::HfImport import;
    CLI::App* import_cmd = cli.add_subcommand("import", "a Hugging Face safetensors model as a new checkpoint folder");
    import_cmd->add_option("--from", import.from, "model.safetensors, model.safetensors.index.json, or their folder")
        ->required();
    import_cmd
        ->add_option("--arch", import.arch,
                     "gpt2 (GPT2LMHeadModel), llama (LlamaForCausalLM) or mixtral (MixtralForCausalLM); default: "
                     "config.json's model_type")
        ->check(CLI::IsMember({"gpt2", "llama", "mixtral"}));
    import_cmd->add_option("--out", import.out, "the checkpoint folder to create (it must hold no checkpoint)")
        ->required();
    int64_t n_head = 0, seq_len = 0;
    double rope_theta = 0, rms_eps = 0;
    CLI::Option* n_head_opt = import_cmd->add_option("--n-head", n_head, "attention heads")->check(CLI::PositiveNumber);
    CLI::Option* seq_len_opt =
        import_cmd->add_option("--seq-len", seq_len, "Llama: the longest sequence (max_position_embeddings)")
            ->check(CLI::PositiveNumber);
    CLI::Option* rope_opt =
        import_cmd->add_option("--rope-theta", rope_theta, "Llama: RoPE's base")->check(CLI::PositiveNumber);
    CLI::Option* eps_opt =
        import_cmd->add_option("--rms-eps", rms_eps, "Llama: RMSNorm's epsilon")->check(CLI::PositiveNumber);
    import_cmd->footer(
        "The architecture and shape come from config.json beside the safetensors files; without it, the tensors "
        "show most of it and the flags give the rest (--arch; gpt2: --n-head; llama: --n-head, --seq-len, "
        "--rope-theta, --rms-eps). DIR gets step-00000000.h5 (weights, zero Adam moments, step 0), "
        "latest, and the tokenizer files beside the safetensors files (tokenizer.json, tokenizer_config.json, "
        "special_tokens_map.json, chat_template.jinja): triad-train --resume DIR fine-tunes it, triad-generate --checkpoint "
        "DIR/step-00000000.h5 samples it with that tokenizer.");
    cli.footer(
        "Hugging Face models:\n"
        "  triad-ckpt import --from model.safetensors|index.json|DIR [--arch gpt2|llama|mixtral] --out DIR\n"
        "  triad-ckpt export PATH --format safetensors --out DIR [--dtype f32|f16|bf16|f64] [--max-shard-size 5GB]\n"
        "(docs/checkpoints.md)");
    CLI11_PARSE(cli, argc, argv);

    if (*import_cmd) {
      if (*n_head_opt) import.model["n_head"] = n_head;
      if (*seq_len_opt) import.model["seq_len"] = seq_len;
      if (*rope_opt) import.model["rope_theta"] = rope_theta;
      if (*eps_opt) import.model["rms_norm_eps"] = rms_eps;
      const std::string written = engine::import_hf(import);
      std::printf("wrote %s (from %s; latest points at it)\n", written.c_str(), import.from.c_str());
      for (const char* name : io::kHfTokenizerFiles)
        if (std::filesystem::exists(std::filesystem::path(import.out) / name))
          std::printf("copied %s into %s\n", name, import.out.c_str());
      return 0;
    }
    path = resolve(path);
    if (*inspect_cmd) return inspect(path);
    if (*verify_cmd) return verify(path);
    if (format == "safetensors") {
      engine::export_hf({path, out, dtype_from_name(dtype), engine::parse_shard_size(max_shard_size)});
      std::printf("wrote %s (a Hugging Face model folder, %s, of %s)\n", out.c_str(), dtype.c_str(), path.c_str());
      return 0;
    }
    engine::export_weights(path, out, dtype_from_name(dtype));
    std::printf("wrote %s (%s %s weights of %s)\n", out.c_str(), dtype.c_str(), format.c_str(), path.c_str());
    return 0;
  });
}
