// Choosing the tokenizer by its file, and the prompt convention shared by the programs.
#include "io/tokenizer.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io/hf_tokenizer.h"
#include "io/triad_tokenizer.h"
#include "tensor/error.h"

namespace triad::io {

std::unique_ptr<const Tokenizer> load_tokenizer(const std::string& path) {
  namespace fs = std::filesystem;
  std::string file = path;
  if (fs::is_directory(path)) {
    file = (fs::path(path) / "tokenizer.json").string();
    TRIAD_CHECK(fs::exists(file), "tokenizer folder '" << path << "' holds no tokenizer.json");
  }
  std::ifstream in(file, std::ios::binary);
  TRIAD_CHECK(in.good(), "cannot open tokenizer file '" << file << "': " << std::strerror(errno));
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  TRIAD_CHECK(!j.is_discarded(), "tokenizer file '" << file << "': not valid JSON");
  if (j.is_object() && j.contains("format")) return std::make_unique<TriadTokenizer>(TriadTokenizer::load(file));
  if (j.is_object() && j.contains("model")) return HfTokenizer::load(file);
  throw Error("tokenizer file '" + file +
              "': neither a triad tokenizer (\"format\": \"triad-bpe\") nor a Hugging Face tokenizer.json (\"model\")");
}

std::vector<int32_t> encode_prompt(const Tokenizer& tokenizer, std::string_view text) {
  std::vector<int32_t> ids = tokenizer.prefix();
  if (ids.empty()) ids.push_back(tokenizer.eot());
  const std::vector<int32_t> body = tokenizer.encode(text);
  ids.insert(ids.end(), body.begin(), body.end());
  return ids;
}

}  // namespace triad::io
