// Checkpoints in one process: resuming continues the run bit for bit (f32, bf16, fp16 with
// its loss scale, dropout), and every kind of damage is an error naming the file and the
// dataset, with --resume auto falling back to the newest checkpoint that loads.
#include <sys/resource.h>

#include <boost/test/unit_test.hpp>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_dir.h"
#include "io/h5file.h"
#include "io/token_file.h"
#include "support/check.h"
#include "support/files.h"
#include "support/training.h"
#include "train/trainer.h"
#include "triad.h"

BOOST_AUTO_TEST_SUITE(test_checkpoint)

using namespace triad;
using test::TempDir;

namespace {

std::string write_tokens(const TempDir& dir) {
  std::vector<uint32_t> tokens;
  for (uint32_t i = 0; i < 6000; ++i) tokens.push_back((i * 7u + (i / 11u) * 5u) % 32u);
  const std::string path = dir.file("tokens.bin");
  io::write_token_file(path, tokens, 32);
  return path;
}

nlohmann::json tiny_config(const std::string& corpus, int64_t steps) {
  nlohmann::json j = test::small_gpt_config(corpus, steps);
  j["model"]["d_model"] = 32;
  j["model"]["vocab_size"] = 32;
  j["train_batch_size"] = 8;
  j["train_micro_batch_size_per_gpu"] = 4;
  j["scheduler"] = {{"type", "WarmupCosineLR"}, {"params", {{"warmup_num_steps", 4}, {"total_num_steps", 20}}}};
  j["seed"] = 7;
  return j;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

void train(const nlohmann::json& j, const engine::TrainOptions& o = {}) { engine::train(engine::parse_config(j), o); }

// A trained run in `dir`: checkpoints at steps 5 and 10 in dir/ckpt.
std::string two_checkpoints(const TempDir& dir) {
  nlohmann::json j = tiny_config(write_tokens(dir), 10);
  j["checkpoint"] = {{"dir", dir.file("ckpt")}, {"every", 5}};
  train(j);
  return dir.file("ckpt");
}

// Flips one byte inside the stored elements of `dataset` (found by their bytes).
void flip_a_byte_of(const std::string& path, const std::string& dataset) {
  const Tensor values = io::H5File::open(path).read(dataset);
  const std::string needle(static_cast<const char*>(values.raw_data()), 64);
  std::string bytes = test::read_bytes(path);
  const size_t at = bytes.find(needle);
  BOOST_TEST_REQUIRE(at != std::string::npos);
  BOOST_TEST_REQUIRE(bytes.find(needle, at + 1) == std::string::npos);
  bytes[at + 21] ^= 0x10;
  test::write_bytes(path, bytes);
}

}  // namespace

BOOST_AUTO_TEST_CASE(resuming_continues_the_run_bit_for_bit) {
  struct Case {
    const char* name;
    const char* precision;  // "" , "bf16", "fp16"
    double dropout;
  };
  for (const Case& k : {Case{"f32", "", 0.0}, Case{"f32 with dropout", "", 0.1}, Case{"bf16", "bf16", 0.0},
                        Case{"fp16", "fp16", 0.0}}) {
    BOOST_TEST_CONTEXT(k.name) {
      TempDir dir;
      nlohmann::json j = tiny_config(write_tokens(dir), 20);
      j["model"]["dropout"] = k.dropout;
      if (*k.precision) j[k.precision] = {{"enabled", true}};
      j["output_dir"] = dir.file("straight");
      train(j, {.metrics_path = dir.file("straight.jsonl")});

      j["output_dir"] = dir.file("resumed");
      j["checkpoint"] = {{"dir", dir.file("ckpt")}};
      j["steps"] = 10;  // the schedule's length is its own key: the first half is the same run
      train(j, {.metrics_path = dir.file("resumed.jsonl")});
      j["steps"] = 20;
      train(j, {.metrics_path = dir.file("resumed.jsonl"), .resume = "auto"});

      const std::vector<double> straight = test::metric_losses(dir.file("straight.jsonl"));
      const std::vector<double> resumed = test::metric_losses(dir.file("resumed.jsonl"));
      BOOST_TEST_REQUIRE(resumed.size() == 20u);
      for (size_t i = 0; i < straight.size(); ++i) BOOST_TEST(resumed[i] == straight[i], "step " << i + 1);
      const auto a = engine::load_model(dir.file("straight/model.h5")).model->named_parameters();
      const auto b = engine::load_model(dir.file("resumed/model.h5")).model->named_parameters();
      for (size_t i = 0; i < a.size(); ++i) BOOST_TEST(test::max_abs_diff(a[i].second, b[i].second) == 0.0, a[i].first);
      const engine::CheckpointSummary s = engine::read_summary(engine::latest_checkpoint(dir.file("ckpt")));
      BOOST_TEST(s.step == 20);
      BOOST_TEST(s.layout["dp"] == 1);
    }
  }
}

BOOST_AUTO_TEST_CASE(saves_keep_the_newest_and_point_latest_at_the_last) {
  TempDir dir;
  nlohmann::json j = tiny_config(write_tokens(dir), 12);
  j["checkpoint"] = {{"dir", dir.file("ckpt")}, {"every", 3}, {"keep", 2}};
  train(j);
  const std::vector<std::string> kept = engine::checkpoints_newest_first(dir.file("ckpt"));
  BOOST_TEST_REQUIRE(kept.size() == 2u);
  BOOST_TEST(kept[0] == dir.file("ckpt/step-00000012.h5"));
  BOOST_TEST(kept[1] == dir.file("ckpt/step-00000009.h5"));
  BOOST_TEST(engine::latest_checkpoint(dir.file("ckpt")) == kept[0]);
  BOOST_TEST(engine::failed_checksums(kept[0]).empty());
  const engine::CheckpointSummary s = engine::read_summary(kept[0]);
  BOOST_TEST(s.kind == "checkpoint");
  BOOST_TEST(s.format_version == engine::kCheckpointFormatVersion);
  BOOST_TEST(s.config["steps"] == 12);
  // Model, master and two moments for each of the 28 parameters, and 7 state datasets.
  BOOST_TEST(s.datasets.size() == 4u * 28u + 7u);
}

// Files this process writes are limited to `bytes` while it lives (a full disk that works as
// root, where a read-only folder does not stop writes): a write past it fails with EFBIG.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    std::signal(SIGXFSZ, SIG_IGN);
    BOOST_REQUIRE(getrlimit(RLIMIT_FSIZE, &saved_) == 0);
    rlimit limit = saved_;
    limit.rlim_cur = bytes;
    BOOST_REQUIRE(setrlimit(RLIMIT_FSIZE, &limit) == 0);
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &saved_);
    std::signal(SIGXFSZ, SIG_DFL);
  }

 private:
  rlimit saved_{};
};

BOOST_AUTO_TEST_CASE(a_failed_save_keeps_the_previous_checkpoint_and_stops_or_continues) {
  TempDir dir;
  const std::string ckpt = two_checkpoints(dir);
  const std::string previous = ckpt + "/step-00000010.h5";
  const auto size = std::filesystem::file_size(previous);
  const std::string efbig = std::strerror(EFBIG);
  auto check_folder = [&] {
    BOOST_TEST(engine::latest_checkpoint(ckpt) == previous);
    BOOST_TEST(engine::failed_checksums(previous).empty());
    BOOST_TEST(
        (engine::checkpoints_newest_first(ckpt) == std::vector<std::string>{previous, ckpt + "/step-00000005.h5"}));
    for (const auto& entry : std::filesystem::directory_iterator(ckpt))
      BOOST_TEST(entry.path().extension() != ".tmp", entry.path());
  };
  nlohmann::json j = tiny_config(dir.file("tokens.bin"), 15);
  j["checkpoint"] = {{"dir", ckpt}, {"every", 5}, {"keep", 0}};

  // Stop (the default): an error naming the file and the cause. A limit below the datasets'
  // bytes refuses the save before the file is created.
  std::string message;
  {
    FileSizeLimit full(4096);
    try {
      train(j, {.resume = "auto"});
    } catch (const Error& e) {
      message = e.what();
    }
  }
  BOOST_TEST(contains(message, "step-00000015.h5"), message);
  BOOST_TEST(contains(message, efbig), message);
  BOOST_TEST(contains(message, "file size limit (4096 bytes"), message);
  check_folder();

  // Continue: training reaches its end, the failure is in the step's metrics line. Half the
  // previous file's size holds the datasets but not the whole file: the write fails part-way
  // (and the abandoned file does not disturb the library: the process goes on and exits).
  j["checkpoint"]["on_error"] = "continue";
  {
    FileSizeLimit full(size / 2);
    train(j, {.metrics_path = dir.file("m.jsonl"), .resume = "auto"});
  }
  check_folder();
  std::ifstream in(dir.file("m.jsonl"));
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  BOOST_TEST_REQUIRE(lines.size() == 5u);  // steps 11 to 15
  BOOST_TEST(!lines[3].contains("checkpoint_error"));
  BOOST_TEST_REQUIRE(lines[4].contains("checkpoint_error"));
  const std::string recorded = lines[4]["checkpoint_error"].get<std::string>();
  BOOST_TEST(contains(recorded, "step-00000015.h5"), recorded);
  BOOST_TEST(contains(recorded, efbig), recorded);
  BOOST_TEST(contains(recorded, "writing elements"), recorded);
  // The next save of the run, with room again, succeeds.
  j["steps"] = 20;
  train(j, {.resume = "auto"});
  BOOST_TEST(engine::latest_checkpoint(ckpt) == ckpt + "/step-00000020.h5");
  BOOST_TEST(engine::failed_checksums(ckpt + "/step-00000020.h5").empty());
}

BOOST_AUTO_TEST_CASE(damage_is_an_error_naming_the_file_and_dataset) {
  TempDir dir;
  const std::string ckpt = two_checkpoints(dir);
  const std::string newest = ckpt + "/step-00000010.h5";
  nlohmann::json j = tiny_config(dir.file("tokens.bin"), 20);
  const auto resume_from = [&](const std::string& spec) {
    return test::error_message([&] { train(j, {.resume = spec}); });
  };

  // A flipped byte inside a dataset's elements.
  const std::string good = test::read_bytes(newest);
  flip_a_byte_of(newest, "/optim/blocks.1.mlp.fc.weight/exp_avg_sq");
  std::string m = resume_from(newest);
  BOOST_TEST(contains(m, newest), m);
  BOOST_TEST(contains(m, "/optim/blocks.1.mlp.fc.weight/exp_avg_sq fails its checksum"), m);
  BOOST_TEST(engine::failed_checksums(newest) == std::vector<std::string>{"/optim/blocks.1.mlp.fc.weight/exp_avg_sq"});

  // Truncated.
  test::write_bytes(newest, good.substr(0, good.size() / 2));
  m = resume_from(newest);
  BOOST_TEST(contains(m, newest), m);

  // A missing dataset: the same checkpoint rewritten without one of its datasets.
  {
    test::write_bytes(newest, good);
    const io::H5File in = io::H5File::open(newest);
    io::H5File out = io::H5File::create(dir.file("partial.h5"));
    for (const std::string& ds : in.list_datasets()) {
      if (ds == "/optim/wte.weight/master") continue;
      const Tensor t = in.read(ds);
      out.create_dataset(ds, t.dtype(), t.shape());
      out.write_range(ds, 0, t);
      out.set_attr_uint64(ds, "checksum", in.get_attr_uint64(ds, "checksum"));
    }
    for (const std::string& key : in.list_attrs("/")) {
      if (in.attr_type("/", key) == io::AttrType::string)
        out.set_attr_string("/", key, in.get_attr_string("/", key));
      else
        out.set_attr_int64("/", key, in.get_attr_int64("/", key));
    }
    out.close();
  }
  m = resume_from(dir.file("partial.h5"));
  BOOST_TEST(contains(m, "partial.h5"), m);
  BOOST_TEST(contains(m, "/optim/wte.weight/master"), m);

  // A config that describes another model: one more block (datasets missing), or wider
  // (every shape differs).
  nlohmann::json deeper = j, wider = j;
  deeper["model"]["n_layer"] = j["model"]["n_layer"].get<int64_t>() + 1;
  wider["model"]["d_model"] = 64;
  m = test::error_message([&] { train(deeper, {.resume = newest}); });
  BOOST_TEST(contains(m, newest), m);
  BOOST_TEST(contains(m, "has no dataset /model/blocks."), m);
  BOOST_TEST(contains(m, "another model than model.* describes"), m);
  m = test::error_message([&] { train(wider, {.resume = newest}); });
  BOOST_TEST(contains(m, "has shape"), m);
  BOOST_TEST(contains(m, "the model's is"), m);

  // `latest` naming nothing.
  test::write_bytes(ckpt + "/latest", "step-00000099.h5\n");
  m = resume_from(ckpt);
  BOOST_TEST(contains(m, ckpt + "/latest"), m);
  BOOST_TEST(contains(m, "step-00000099.h5"), m);

  // A file that is not HDF5 at all.
  m = resume_from(dir.write("junk.h5", "not a checkpoint"));
  BOOST_TEST(contains(m, "junk.h5"), m);
}

BOOST_AUTO_TEST_CASE(resume_auto_falls_back_to_the_newest_checkpoint_that_loads) {
  TempDir dir;
  const std::string ckpt = two_checkpoints(dir);
  flip_a_byte_of(ckpt + "/step-00000010.h5", "/optim/wpe.weight/exp_avg");
  test::write_bytes(ckpt + "/latest", "step-00000099.h5\n");
  nlohmann::json j = tiny_config(dir.file("tokens.bin"), 12);
  j["checkpoint"] = {{"dir", ckpt}, {"keep", 0}};
  train(j, {.metrics_path = dir.file("m.jsonl"), .resume = "auto"});
  BOOST_TEST(test::metric_losses(dir.file("m.jsonl")).size() == 7u);  // steps 6 to 12: resumed at step 5
  BOOST_TEST(engine::latest_checkpoint(ckpt) == ckpt + "/step-00000012.h5");

  // Nothing to resume from: a fresh start.
  TempDir empty;
  j["checkpoint"]["dir"] = empty.file("none");
  train(j, {.metrics_path = empty.file("m.jsonl"), .resume = "auto"});
  BOOST_TEST(test::metric_losses(empty.file("m.jsonl")).size() == 12u);
}

BOOST_AUTO_TEST_CASE(export_and_load_the_weights) {
  TempDir dir;
  const std::string ckpt = two_checkpoints(dir) + "/step-00000010.h5";
  engine::export_weights(ckpt, dir.file("w32.h5"), DType::f32);
  engine::export_weights(ckpt, dir.file("w16.h5"), DType::bf16);
  const auto full = engine::load_model(ckpt).model->named_parameters();
  const auto w32 = engine::load_model(dir.file("w32.h5")).model->named_parameters();
  const auto w16 = engine::load_model(dir.file("w16.h5")).model->named_parameters();
  BOOST_TEST(engine::read_summary(dir.file("w16.h5")).kind == "weights");
  BOOST_TEST(engine::read_summary(dir.file("w16.h5")).datasets.size() == 28u);
  for (size_t i = 0; i < full.size(); ++i) {
    BOOST_TEST(test::max_abs_diff(full[i].second, w32[i].second) == 0.0, full[i].first);
    // bf16 keeps 8 significant bits: within 2^-8 of each value.
    BOOST_TEST(test::max_abs_diff(full[i].second, w16[i].second) <= ops::max_abs(full[i].second) / 256.0);
  }
  // A weights file holds no training state.
  nlohmann::json j = tiny_config(dir.file("tokens.bin"), 20);
  const std::string m = test::error_message([&] { train(j, {.resume = dir.file("w32.h5")}); });
  BOOST_TEST(contains(m, "weights file, not a checkpoint"), m);
}

BOOST_AUTO_TEST_SUITE_END()  // test_checkpoint
