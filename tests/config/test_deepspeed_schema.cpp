// docs/deepspeed-config.md against the parser: every DeepSpeed key in its table parses at
// DeepSpeed's default and at the example value with the behaviour the row states
// (Implemented: accepted; Note: accepted with a notice naming the key; Error: an error
// naming the key, the default still accepted), in the optimizer or scheduler types the row
// names (ZeRO++ rows at stage 3); every key of triad's own tables parses at its default
// (the Llama's with model.arch "llama"); and every key the parser reads while doing so has
// a row in one of the tables.
#include <boost/test/unit_test.hpp>
#include <fstream>
#include <set>
#include <sstream>

#include "config/config.h"
#include "config/json_reader.h"
#include "rlhf/rlhf_config.h"
#include "support/check.h"
#include "tensor/error.h"

BOOST_AUTO_TEST_SUITE(test_deepspeed_schema)

using namespace triad;
using json = nlohmann::json;

namespace {

struct Row {
  std::string key, fallback, example, where, behaviour;
};

std::string trim(std::string s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '`')) s.erase(s.begin());
  while (!s.empty() && (s.back() == ' ' || s.back() == '`')) s.pop_back();
  return s;
}

// The rows of the table under `heading`, cells trimmed of spaces and backticks.
std::vector<std::vector<std::string>> table(const std::string& heading) {
  std::ifstream in(test::data_path("../../docs/deepspeed-config.md"));
  BOOST_REQUIRE(in.good());
  std::vector<std::vector<std::string>> rows;
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("## ", 0) == 0) inside = line == "## " + heading;
    if (!inside || line.rfind("| ", 0) != 0 || line.rfind("| Key", 0) == 0) continue;
    std::vector<std::string> cells;
    std::stringstream cells_in(line.substr(2, line.size() - 4));
    for (std::string cell; std::getline(cells_in, cell, '|');) cells.push_back(trim(cell));
    rows.push_back(cells);
  }
  return rows;
}

std::vector<Row> deepspeed_rows() {
  std::vector<Row> rows;
  for (const auto& c : table("DeepSpeed keys")) {
    BOOST_REQUIRE_EQUAL(c.size(), 5u);
    rows.push_back({c[0], c[1], c[2], c[3], c[4]});
  }
  return rows;
}

json base() {
  return {{"model", {{"n_layer", 2}, {"n_head", 2}, {"d_model", 24}, {"seq_len", 8}, {"vocab_size", 16}}},
          {"train_micro_batch_size_per_gpu", 2},
          {"steps", 5000}};
}

// Sets a dotted key, creating the objects on the way.
void set(json& j, const std::string& key, const json& value) {
  json* node = &j;
  size_t start = 0;
  for (size_t dot; (dot = key.find('.', start)) != std::string::npos; start = dot + 1)
    node = &(*node)[key.substr(start, dot - start)];
  (*node)[key.substr(start)] = value;
}

// The config of `row` set to `value` in the optimizer or scheduler type `type` ("": none).
json config_for(const Row& row, const json& value, const std::string& type) {
  json j = base();
  if (row.key.rfind("optimizer.params.", 0) == 0 && !type.empty()) j["optimizer"]["type"] = type;
  if (row.key.rfind("scheduler.params.", 0) == 0 && !type.empty()) {
    j["scheduler"]["type"] = type;
    if (type == "OneCycle") j["scheduler"]["params"] = {{"cycle_min_lr", 1e-4}, {"cycle_max_lr", 1e-3}};
    if (type.rfind("Warmup", 0) == 0) j["scheduler"]["params"]["warmup_num_steps"] = 3;
  }
  if (row.key == "gradient_accumulation_steps" || row.key == "train_batch_size") j.erase("train_micro_batch_size_per_gpu");
  if (row.key == "gradient_accumulation_steps") j["train_batch_size"] = 8;
  if (row.key.rfind("zero_optimization.zero_", 0) == 0) j["zero_optimization"]["stage"] = 3;  // ZeRO++ keys
  if (row.key.rfind("zero_optimization.offload_optimizer", 0) == 0) j["zero_optimization"]["stage"] = 2;  // stages 1-3
  if (row.key.rfind("zero_optimization.offload_param", 0) == 0) j["zero_optimization"]["stage"] = 3;
  set(j, row.key, value);
  return j;
}

std::vector<std::string> types_of(const Row& row) {
  std::vector<std::string> types;
  std::stringstream in(row.where);
  for (std::string t; std::getline(in, t, ',');) types.push_back(trim(t));
  if (types.empty()) types.push_back("");
  return types;
}

constexpr int64_t kRanks = 2;

}  // namespace

BOOST_AUTO_TEST_CASE(every_row_behaves_as_documented_and_every_key_read_is_documented) {
  const std::vector<Row> rows = deepspeed_rows();
  BOOST_TEST(rows.size() > 90u);
  engine::JsonReader::KeyLog log;
  for (const Row& row : rows) {
    const std::string kind = row.behaviour.substr(0, row.behaviour.find(':'));
    BOOST_TEST_REQUIRE((kind == "Implemented" || kind.rfind("Implemented", 0) == 0 || kind == "Note" || kind == "Error"),
                       row.key << ": behaviour '" << row.behaviour << "'");
    for (const std::string& type : types_of(row)) {
      BOOST_TEST_CONTEXT(row.key << (type.empty() ? "" : " under " + type)) {
        if (row.fallback != "—") {
          const engine::TrainConfig c = engine::parse_config(config_for(row, json::parse(row.fallback), type), kRanks);
          if (kind == "Note") {
            bool named = false;
            for (const std::string& n : c.notices) named |= n.find(row.key.substr(row.key.rfind('.') + 1)) == 0 ||
                                                             n.find(row.key) != std::string::npos;
            BOOST_TEST(named, "no notice names " << row.key);
          }
        }
        const json example = config_for(row, json::parse(row.example), type);
        if (kind == "Error")
          test::check_error([&] { engine::parse_config(example, kRanks); }, {row.key});
        else
          BOOST_CHECK_NO_THROW(engine::parse_config(example, kRanks));
      }
    }
  }
  std::set<std::string> documented;
  for (const Row& row : rows) documented.insert(row.key);
  for (const auto& c : table("triad's own keys")) {
    BOOST_REQUIRE_EQUAL(c.size(), 2u);
    documented.insert(c[0]);
    if (c[1] == "—") continue;
    json j = base();
    set(j, c[0], json::parse(c[1]));
    BOOST_CHECK_NO_THROW(engine::parse_config(j, kRanks));
  }
  for (const auto& c : table("triad's keys of model.arch \"llama\"")) {
    BOOST_REQUIRE_EQUAL(c.size(), 2u);
    documented.insert(c[0]);
    json j = base();
    j["model"]["arch"] = "llama";
    if (c[1] != "—") set(j, c[0], json::parse(c[1]));
    BOOST_CHECK_NO_THROW(engine::parse_config(j, kRanks));
  }
  for (const std::string& key : log.keys()) {
    bool known = documented.count(key) > 0;
    for (const std::string& d : documented) known |= d.rfind(key + ".", 0) == 0;  // a section of documented keys
    BOOST_TEST(known, "the parser reads '" << key << "', which docs/deepspeed-config.md does not list");
  }
}

// triad-rlhf's table: every key parses at its default in its step, and every key the RLHF
// parser reads (its own and, through the merged sections, the training keys) is documented.
BOOST_AUTO_TEST_CASE(every_rlhf_key_is_documented_and_parses_at_its_default) {
  json rl = base();
  rl["data"] = {{"path", "pairs.jsonl"}, {"tokenizer", "tok.json"}};
  rl["train_batch_size"] = 2;
  rl["reward"] = {{"init", "sft.h5"}};
  rl["dpo"] = {{"init", "sft.h5"}};
  rl["ppo"] = {{"reward_model", "rm.h5"}, {"actor", {{"init", "sft.h5"}}}, {"critic", {{"init", "rm.h5"}}}};
  rl["grpo"] = {{"reward_model", "rm.h5"}, {"actor", {{"init", "sft.h5"}}}};
  const std::vector<std::string> steps = {"sft", "reward", "dpo", "ppo", "grpo"};
  std::set<std::string> documented;
  for (const Row& row : deepspeed_rows()) documented.insert(row.key);
  for (const char* heading : {"triad's own keys", "triad's keys of model.arch \"llama\""})
    for (const auto& c : table(heading)) documented.insert(c[0]);
  engine::JsonReader::KeyLog log;
  for (const std::string& step : steps) BOOST_CHECK_NO_THROW(rlhf::parse_rlhf_config(rl, step, 1));
  const auto rlhf_rows = table("triad-rlhf's keys");
  BOOST_TEST(rlhf_rows.size() > 40u);
  for (const auto& c : rlhf_rows) {
    BOOST_REQUIRE_EQUAL(c.size(), 2u);
    documented.insert(c[0]);
    if (c[1] == "—") continue;
    const std::string section = c[0].substr(0, c[0].find('.'));
    json j = rl;
    set(j, c[0], json::parse(c[1]));
    BOOST_TEST_CONTEXT(c[0]) { BOOST_CHECK_NO_THROW(rlhf::parse_rlhf_config(j, section == "data" ? "ppo" : section, 1)); }
  }
  for (const std::string& key : log.keys()) {
    bool known = documented.count(key) > 0;
    for (const std::string& d : documented) known |= d.rfind(key + ".", 0) == 0;
    BOOST_TEST(known, "the RLHF parser reads '" << key << "', which docs/deepspeed-config.md does not list");
  }
}

BOOST_AUTO_TEST_SUITE_END()  // test_deepspeed_schema
