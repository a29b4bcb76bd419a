#include "checkpoint/hf_checkpoint.h"

#include <algorithm>
#include <cctype>
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

namespace {

nlohmann::json read_json(const std::string& path, const char* what) {
  std::ifstream in(path);
  const nlohmann::json json = nlohmann::json::parse(in, nullptr, false);
  TRIAD_CHECK(in.good() || in.eof(), what << ": cannot read '" << path << "'");
  TRIAD_CHECK(!json.is_discarded(), what << ": '" << path << "' is not valid JSON");
  return json;
}

std::string read_bytes(const fs::path& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  TRIAD_CHECK(in.good() || in.eof(), what << ": cannot read '" << path.string() << "'");
  return bytes;
}

// The tokenizer files of io::kHfTokenizerFiles in `folder`: name, bytes.
std::vector<std::pair<std::string, std::string>> tokenizer_files(const fs::path& folder, const char* what) {
  std::vector<std::pair<std::string, std::string>> files;
  for (const char* name : io::kHfTokenizerFiles)
    if (fs::exists(folder / name)) files.emplace_back(name, read_bytes(folder / name, what));
  return files;
}

}  // namespace

std::string import_hf(const HfImport& import) {
  TRIAD_CHECK(import.arch.empty() || io::is_hf_architecture(import.arch),
              "import: --arch " << import.arch << " is not one triad converts (" << io::hf_architecture_names() << ")");
  TRIAD_CHECK(!fs::exists(import.out) ||
                  (latest_checkpoint(import.out).empty() && checkpoints_newest_first(import.out).empty()),
              "import: '" << import.out << "' already holds checkpoints; import into a new folder");
  const io::SafetensorsCheckpoint hf = io::SafetensorsCheckpoint::open(import.from);
  const std::string config_path = (fs::path(hf.folder()) / "config.json").string();
  nlohmann::json model = nlohmann::json::object(), config;
  std::string arch = import.arch;
  if (fs::exists(config_path)) {
    config = read_json(config_path, "import");
    if (arch.empty()) arch = io::arch_from_hf_config(config, config_path);
    model = io::model_from_hf_config(arch, config, config_path);
  }
  TRIAD_CHECK(!arch.empty(), "import: no config.json beside '" << hf.path() << "' names the model_type; pass --arch ("
                                                               << io::hf_architecture_names() << ")");
  io::check_hf_names(arch, hf);
  for (const auto& [key, value] : import.model.items()) model[key] = value;
  io::complete_model_from_tensors(arch, hf, model);
  const std::vector<std::string> missing = io::missing_model_fields(arch, model);
  if (!missing.empty()) {
    std::string list;
    for (const std::string& m : missing) list += (list.empty() ? "" : ", ") + m;
    TRIAD_CHECK(false, "import: the " << arch << " model of '" << hf.path() << "' needs " << list << ", which "
                                      << (config.is_null() ? "no config.json beside it" : "'" + config_path + "'")
                                      << " and its tensors do not give; what is known: " << model.dump());
  }
  // (no config.json: a missing head is the tied embedding's copy, as HF would load it)
  const bool tie = config.is_null() || io::hf_ties_head(arch, config);
  const io::NamedTensors weights = io::from_hf(arch, model, hf, tie);
  const auto tokenizer = tokenizer_files(hf.folder(), "import");

  const bool created = !fs::exists(import.out);
  std::error_code ec;
  fs::create_directories(import.out, ec);
  TRIAD_CHECK(!ec, "import: cannot create the folder '" << import.out << "': " << ec.message());
  const std::string name = checkpoint_file_name(0), path = (fs::path(import.out) / name).string();
  try {
    save_initial_checkpoint(path, {{"model", model}, {"train_batch_size", 1}, {"steps", 1}}, weights);
    for (const auto& [file, bytes] : tokenizer)
      io::write_file_atomically((fs::path(import.out) / file).string(), {{bytes.data(), bytes.size()}},
                                "tokenizer file");
    point_latest(import.out, name);
  } catch (const Error&) {
    if (created) fs::remove_all(import.out, ec);  // the folder held nothing before
    throw;
  }
  return path;
}

void export_hf(const HfExport& exp) {
  const ModelWeights w = read_weights(exp.checkpoint);
  const nlohmann::json model = w.config.value("model", nlohmann::json::object());
  const std::string arch = io::hf_architecture(model);
  TRIAD_CHECK(io::is_hf_architecture(arch), "export: '" << exp.checkpoint << "' holds a " << arch
                                                        << " model; safetensors export converts "
                                                        << io::hf_architecture_names());
  const io::NamedTensors tensors = io::to_hf(arch, w.weights, exp.dtype);

  // The tokenizer: beside the checkpoint (as import leaves it), else the one it was trained with.
  fs::path tokenizer_path = fs::path(exp.checkpoint).parent_path() / "tokenizer.json";
  if (!fs::exists(tokenizer_path) && w.config.contains("data"))
    tokenizer_path = w.config["data"].value("tokenizer", "");
  nlohmann::json bos, eos;
  std::vector<std::pair<std::string, std::string>> tokenizer;
  if (!tokenizer_path.empty() && fs::exists(tokenizer_path)) {
    const std::unique_ptr<const io::Tokenizer> tok = io::load_tokenizer(tokenizer_path.string());
    eos = tok->eot();
    bos = tok->prefix().empty() ? tok->eot() : tok->prefix().front();
    if (dynamic_cast<const io::HfTokenizer*>(tok.get()))
      tokenizer =
          tokenizer_files(fs::is_directory(tokenizer_path) ? tokenizer_path : tokenizer_path.parent_path(), "export");
  }
  const std::string config = io::hf_config(model, exp.dtype, bos, eos).dump(2) + "\n";
  const std::string generation = nlohmann::json({{"bos_token_id", bos}, {"eos_token_id", eos}}).dump(2) + "\n";

  std::error_code ec;
  fs::create_directories(exp.out, ec);
  TRIAD_CHECK(!ec, "export: cannot create the folder '" << exp.out << "': " << ec.message());
  const std::vector<std::string> written =
      io::write_safetensors_shards(exp.out, tensors, {{"format", "pt"}}, exp.max_shard_bytes);
  for (const fs::directory_entry& e : fs::directory_iterator(exp.out)) {
    const std::string name = e.path().filename().string();
    const bool model_file = name == "model.safetensors" || name == "model.safetensors.index.json" ||
                            (name.starts_with("model-") && name.ends_with(".safetensors"));
    if (model_file && std::find(written.begin(), written.end(), name) == written.end()) fs::remove(e.path());
  }
  const auto write = [&](const std::string& name, const std::string& bytes) {
    io::write_file_atomically((fs::path(exp.out) / name).string(), {{bytes.data(), bytes.size()}}, "export");
  };
  write("config.json", config);
  write("generation_config.json", generation);
  for (const auto& [name, bytes] : tokenizer) write(name, bytes);
}

int64_t parse_shard_size(const std::string& text) {
  size_t end = 0;
  double number = 0;
  try {
    number = std::stod(text, &end);
  } catch (const std::exception&) {
    end = 0;
  }
  std::string unit = text.substr(end);
  for (char& c : unit) c = char(std::toupper(static_cast<unsigned char>(c)));
  static const std::pair<const char*, double> kUnits[] = {
      {"", 1},      {"B", 1},        {"KB", 1e3},        {"MB", 1e6},           {"GB", 1e9},
      {"TB", 1e12}, {"KIB", 1024.0}, {"MIB", 1048576.0}, {"GIB", 1073741824.0}, {"TIB", 1099511627776.0}};
  for (const auto& [name, scale] : kUnits)
    if (end > 0 && unit == name && number > 0) return int64_t(number * scale);
  TRIAD_CHECK(false, "--max-shard-size '" << text
                                          << "' is not a positive size (bytes, or a number with KB, MB, GB, KiB, "
                                             "MiB or GiB: \"5GB\")");
  return 0;
}

}  // namespace triad::engine
