// Reading text corpora (plain text, JSON Lines) from files and folders and cutting them into
// documents.
#include "io/text_corpus.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "tensor/error.h"

namespace triad::io {

namespace fs = std::filesystem;

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TRIAD_CHECK(in.good(), "cannot open corpus file '" << path << "': " << std::strerror(errno));
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  TRIAD_CHECK(!in.bad(), "cannot read corpus file '" << path << "'");
  return bytes;
}

void end_document(TextCorpus& c, int64_t& begin) {
  if (int64_t(c.text.size()) > begin) c.document_ends.push_back(int64_t(c.text.size()));
  begin = int64_t(c.text.size());
}

// JSON Lines: each line's "text" is a document.
void add_jsonl(TextCorpus& c, const std::string& path, const std::string& bytes) {
  std::string_view rest(bytes);
  for (int64_t line_no = 1; !rest.empty(); ++line_no) {
    const size_t nl = rest.find('\n');
    const std::string_view line = rest.substr(0, nl);
    rest.remove_prefix(nl == std::string_view::npos ? rest.size() : nl + 1);
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    const nlohmann::json row = nlohmann::json::parse(line, nullptr, false);
    TRIAD_CHECK(!row.is_discarded() && row.is_object(),
                "corpus file '" << path << "' line " << line_no << ": not a JSON object");
    TRIAD_CHECK(row.contains("text") && row["text"].is_string(),
                "corpus file '" << path << "' line " << line_no << ": expected a string field \"text\"");
    const int64_t begin = int64_t(c.text.size());
    c.text += row["text"].get<std::string>();
    if (int64_t(c.text.size()) > begin) c.document_ends.push_back(int64_t(c.text.size()));
  }
}

void add_file(TextCorpus& c, const std::string& path, const std::string& separator) {
  const std::string bytes = read_file(path);
  c.files.push_back(path);
  if (fs::path(path).extension() == ".jsonl") {
    add_jsonl(c, path, bytes);
    return;
  }
  int64_t begin = int64_t(c.text.size());
  if (separator.empty()) {
    c.text += bytes;
    end_document(c, begin);
    return;
  }
  std::string_view rest(bytes);
  while (!rest.empty()) {
    const size_t nl = rest.find('\n');
    const size_t len = nl == std::string_view::npos ? rest.size() : nl + 1;
    std::string_view line = rest.substr(0, len), content = line;
    if (!content.empty() && content.back() == '\n') content.remove_suffix(1);
    if (!content.empty() && content.back() == '\r') content.remove_suffix(1);
    if (content == separator) {
      end_document(c, begin);
    } else {
      c.text += line;
    }
    rest.remove_prefix(len);
  }
  end_document(c, begin);
}

}  // namespace

std::string_view TextCorpus::document(int64_t i) const {
  TRIAD_CHECK(i >= 0 && i < num_documents(), "TextCorpus: document " << i << " of " << num_documents());
  const int64_t begin = i == 0 ? 0 : document_ends[size_t(i - 1)];
  return std::string_view(text).substr(size_t(begin), size_t(document_ends[size_t(i)] - begin));
}

std::vector<std::string_view> TextCorpus::documents() const {
  std::vector<std::string_view> out;
  out.reserve(document_ends.size());
  for (int64_t i = 0; i < num_documents(); ++i) out.push_back(document(i));
  return out;
}

TextCorpus read_corpus(const std::vector<std::string>& paths, const std::string& separator_line) {
  TRIAD_CHECK(!paths.empty(), "read_corpus: no corpus paths given");
  TextCorpus c;
  for (const std::string& path : paths) {
    std::error_code ec;
    const fs::file_status st = fs::status(path, ec);
    TRIAD_CHECK(!ec && fs::exists(st), "corpus path '" << path << "' does not exist"
                                                       << (ec && ec != std::errc::no_such_file_or_directory
                                                               ? " or cannot be read: " + ec.message()
                                                               : ""));
    if (!fs::is_directory(st)) {
      add_file(c, path, separator_line);
      continue;
    }
    std::vector<fs::path> files;
    fs::directory_iterator it(path, ec);
    TRIAD_CHECK(!ec, "cannot list corpus folder '" << path << "': " << ec.message());
    for (; it != fs::directory_iterator(); it.increment(ec)) {
      TRIAD_CHECK(!ec, "cannot list corpus folder '" << path << "': " << ec.message());
      const fs::path& p = it->path();
      if (it->is_symlink(ec) || !it->is_regular_file(ec) || p.extension() == ".dat") continue;
      files.push_back(p);
    }
    std::sort(files.begin(), files.end());
    for (const fs::path& p : files) add_file(c, p.string(), separator_line);
  }
  TRIAD_CHECK(
      !c.text.empty(), "corpus is empty: no text in " << [&] {
        std::string s;
        for (const auto& p : paths) s += (s.empty() ? "'" : ", '") + p + "'";
        return s;
      }() << (separator_line.empty() ? "" : " (separator line '" + separator_line + "')"));
  return c;
}

std::vector<uint32_t> encode_corpus(const Tokenizer& tokenizer, const TextCorpus& corpus) {
  std::vector<uint32_t> out;
  out.reserve(corpus.text.size() / 3);
  for (int64_t i = 0; i < corpus.num_documents(); ++i) {
    if (i > 0) out.push_back(uint32_t(tokenizer.eot()));
    for (const int32_t id : tokenizer.prefix()) out.push_back(uint32_t(id));
    for (const int32_t id : tokenizer.encode(corpus.document(i))) out.push_back(uint32_t(id));
  }
  return out;
}

}  // namespace triad::io
