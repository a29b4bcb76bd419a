#include "checkpoint/hf_checkpoint.h"

#include <filesystem>
#include <fstream>
#include <iterator>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_dir.h"
#include "io/atomic_file.h"
#include "io/hf_models.h"
#include "io/hf_tokenizer.h"
#include "io/safetensors.h"

namespace triad::engine {

namespace fs = std::filesystem;

std::string import_hf(const HfImport& import) {
  TRIAD_CHECK(io::is_hf_architecture(import.arch),
              "import: --arch " << import.arch << " is not one triad converts (" << io::hf_architecture_names() << ")");
  TRIAD_CHECK(!fs::exists(import.out) ||
                  (latest_checkpoint(import.out).empty() && checkpoints_newest_first(import.out).empty()),
              "import: '" << import.out << "' already holds checkpoints; import into a new folder");
  const io::SafetensorsCheckpoint hf = io::SafetensorsCheckpoint::open(import.from);
  const std::string config_path = (fs::path(hf.folder()) / "config.json").string();
  nlohmann::json model = nlohmann::json::object(), config;
  if (fs::exists(config_path)) {
    std::ifstream in(config_path);
    config = nlohmann::json::parse(in, nullptr, false);
    TRIAD_CHECK(in.good() || in.eof(), "import: cannot read '" << config_path << "'");
    TRIAD_CHECK(!config.is_discarded(), "import: '" << config_path << "' is not valid JSON");
    model = io::model_from_hf_config(import.arch, config, config_path);
  }
  io::check_hf_names(import.arch, hf);
  for (const auto& [key, value] : import.model.items()) model[key] = value;
  io::complete_model_from_tensors(import.arch, hf, model);
  const std::vector<std::string> missing = io::missing_model_fields(import.arch, model);
  if (!missing.empty()) {
    std::string list;
    for (const std::string& m : missing) list += (list.empty() ? "" : ", ") + m;
    TRIAD_CHECK(false, "import: the " << import.arch << " model of '" << hf.path() << "' needs " << list << ", which "
                                      << (config.is_null() ? "no config.json beside it" : "'" + config_path + "'")
                                      << " and its tensors do not give; what is known: " << model.dump());
  }
  // (no config.json: a missing head is the tied embedding's copy, as HF would load it)
  const bool tie = config.is_null() || io::hf_ties_head(import.arch, config);
  const io::NamedTensors weights = io::from_hf(import.arch, model, hf, tie);
  std::vector<std::pair<std::string, std::string>> tokenizer_files;  // name, bytes
  for (const char* name : io::kHfTokenizerFiles) {
    const fs::path source = fs::path(hf.folder()) / name;
    if (!fs::exists(source)) continue;
    std::ifstream in(source, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    TRIAD_CHECK(in.good() || in.eof(), "import: cannot read '" << source.string() << "'");
    tokenizer_files.emplace_back(name, std::move(bytes));
  }

  const bool created = !fs::exists(import.out);
  std::error_code ec;
  fs::create_directories(import.out, ec);
  TRIAD_CHECK(!ec, "import: cannot create the folder '" << import.out << "': " << ec.message());
  const std::string name = checkpoint_file_name(0), path = (fs::path(import.out) / name).string();
  try {
    save_initial_checkpoint(path, {{"model", model}, {"train_batch_size", 1}, {"steps", 1}}, weights);
    for (const auto& [file, bytes] : tokenizer_files)
      io::write_file_atomically((fs::path(import.out) / file).string(), {{bytes.data(), bytes.size()}},
                                "tokenizer file");
    point_latest(import.out, name);
  } catch (const Error&) {
    if (created) fs::remove_all(import.out, ec);  // the folder held nothing before
    throw;
  }
  return path;
}

void export_hf(const std::string& checkpoint, const std::string& out, DType dtype) {
  const ModelWeights w = read_weights(checkpoint);
  const nlohmann::json model = w.config.value("model", nlohmann::json::object());
  const std::string arch = model.value("arch", "gpt2");
  TRIAD_CHECK(io::is_hf_architecture(arch), "export: '" << checkpoint << "' holds a " << arch
                                                        << " model; safetensors export converts "
                                                        << io::hf_architecture_names());
  io::write_safetensors(out, io::to_hf(arch, w.weights, dtype), {{"format", "pt"}});
}

}  // namespace triad::engine
