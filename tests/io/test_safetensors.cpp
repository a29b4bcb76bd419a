// safetensors files (io/safetensors.h): the reference files written by HF's safetensors
// package (tests/reference/safetensors_reference.py) read back the values they were made
// from; triad's writer lays out what the format says and round-trips every dtype bit-exactly;
// a sharded checkpoint reads through its index; every malformed file is an Error naming the
// file and its problem.
#include <boost/test/unit_test.hpp>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "io/tensor_file.h"
#include "support/check.h"
#include "support/files.h"
#include "tensor/ops.h"
#include "tensor/random.h"

BOOST_AUTO_TEST_SUITE(test_safetensors)

using namespace triad;
using io::SafetensorsCheckpoint;
using io::SafetensorsFile;
using test::check_error;
using test::TempDir;

namespace {

const std::string kDir = test::data_path("safetensors");

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(ops::contiguous(a).raw_data(), ops::contiguous(b).raw_data(), a.nbytes()) == 0;
}

// A tensor whose element k has the raw bits random_bits(seed, k) (its low bytes): every bit
// pattern, NaN payloads and subnormals included, must survive bit-exactly.
Tensor pattern(const Shape& shape, DType dt, uint64_t seed) {
  Tensor t = Tensor::empty(shape, dt);
  const size_t es = element_size(dt);
  for (int64_t k = 0; k < t.numel(); ++k) {
    const uint64_t bits = random_bits(seed, uint64_t(k));
    std::memcpy(static_cast<unsigned char*>(t.raw_data()) + size_t(k) * es, &bits, es);
  }
  return t;
}

// A file of the header `json` (as text) followed by `data_bytes` zero bytes.
std::string file_bytes(const std::string& json, size_t data_bytes) {
  const uint64_t n = json.size();
  std::string out(reinterpret_cast<const char*>(&n), 8);
  return out + json + std::string(data_bytes, '\0');
}

}  // namespace

BOOST_AUTO_TEST_CASE(reads_the_reference_gpt2_file) {
  const io::NamedTensors ref = io::read_tensor_file(test::data_path("gpt_reference.tns"));
  const auto param = [&](const std::string& name) { return io::find_tensor(ref, "param/" + name, "reference"); };
  const SafetensorsFile f = SafetensorsFile::open(kDir + "/gpt2/model.safetensors");
  BOOST_TEST(f.metadata().at("format") == "pt");
  BOOST_TEST(f.entries().size() == 2u + 2 * 14 + 2);  // wte, wpe; per layer 12 weights + 2 buffers; ln_f
  BOOST_TEST(same_bits(f.read("transformer.wte.weight"), param("wte.weight")));
  BOOST_TEST(same_bits(f.read("transformer.h.1.ln_2.bias"), param("blocks.1.ln2.bias")));
  // Conv1D weights are stored (in, out): triad's (out, in) transposed.
  const Tensor c_fc = f.read("transformer.h.0.mlp.c_fc.weight");
  BOOST_TEST(c_fc.shape() == (Shape{64, 256}));
  BOOST_TEST(same_bits(c_fc, ops::contiguous(ops::transpose(param("blocks.0.mlp.fc.weight"), 0, 1))));
  const io::SafetensorsEntry& mask = f.entry("transformer.h.0.attn.bias");
  BOOST_TEST(mask.dtype == "F32");
  BOOST_TEST(mask.shape == (Shape{1, 1, 32, 32}));
  BOOST_TEST(f.read("transformer.h.0.attn.masked_bias").shape() == Shape{});
}

BOOST_AUTO_TEST_CASE(write_lays_out_the_format_and_round_trips_every_dtype) {
  TempDir dir;
  io::NamedTensors tensors;
  for (DType dt : {DType::f64, DType::f32, DType::f16, DType::bf16})
    tensors.emplace_back(std::string("t_") + dtype_name(dt), pattern({3, 5}, dt, uint64_t(dt)));
  tensors.emplace_back("scalar", Tensor::full({}, 2.5));
  tensors.emplace_back("empty", Tensor::empty({4, 0}, DType::f16));
  tensors.emplace_back("transposed", ops::transpose(pattern({2, 3}, DType::f32, 9), 0, 1));
  const std::string path = dir.file("w.safetensors");
  io::write_safetensors(path, tensors, {{"format", "pt"}});

  // The layout by hand: u64 length, a header padded to 8 bytes, offsets tiling the data.
  const std::string bytes = test::read_bytes(path);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  BOOST_TEST((8 + n) % 8 == 0u);
  const nlohmann::json header = nlohmann::json::parse(bytes.substr(8, n));
  BOOST_TEST(header["__metadata__"] == nlohmann::json({{"format", "pt"}}));
  BOOST_TEST(header["t_bf16"]["dtype"] == "BF16");
  BOOST_TEST(header["t_f16"]["shape"] == nlohmann::json({3, 5}));
  int64_t end = 0;
  for (const auto& [name, t] : tensors) {
    BOOST_TEST(header[name]["data_offsets"] == nlohmann::json({end, end + int64_t(t.nbytes())}), name);
    end += int64_t(t.nbytes());
  }
  BOOST_TEST(bytes.size() == 8 + n + size_t(end));

  const SafetensorsFile f = SafetensorsFile::open(path);
  BOOST_TEST(f.metadata().at("format") == "pt");
  for (const auto& [name, t] : tensors) BOOST_TEST(same_bits(f.read(name), ops::contiguous(t)), name);
}

BOOST_AUTO_TEST_CASE(f16_and_bf16_copies_hold_the_f32_values) {
  const SafetensorsCheckpoint f32 = SafetensorsCheckpoint::open(kDir + "/llama");
  for (const std::string& name : {"llama_f16.safetensors", "llama_bf16.safetensors"}) {
    const SafetensorsFile low = SafetensorsFile::open(kDir + "/" + name);
    BOOST_TEST(low.entries().size() == f32.names().size());
    for (const io::SafetensorsEntry& e : low.entries()) {
      BOOST_TEST(e.dtype == (name == "llama_f16.safetensors" ? "F16" : "BF16"));
      BOOST_TEST(same_bits(ops::to(low.read(e.name), DType::f32), f32.read(e.name)), name << ": " << e.name);
    }
  }
}

BOOST_AUTO_TEST_CASE(a_sharded_checkpoint_reads_through_its_index) {
  const SafetensorsCheckpoint c = SafetensorsCheckpoint::open(kDir + "/llama");
  BOOST_TEST(c.path() == kDir + "/llama/model.safetensors.index.json");
  BOOST_TEST(c.folder() == kDir + "/llama");
  BOOST_TEST(c.names().size() == 1u + 2 * 9 + 2);
  const SafetensorsFile first = SafetensorsFile::open(kDir + "/llama/model-00001-of-00002.safetensors");
  const SafetensorsFile second = SafetensorsFile::open(kDir + "/llama/model-00002-of-00002.safetensors");
  BOOST_TEST(first.entries().size() + second.entries().size() == c.names().size());
  BOOST_TEST(same_bits(c.read("model.embed_tokens.weight"), first.read("model.embed_tokens.weight")));
  BOOST_TEST(same_bits(c.read("lm_head.weight"), second.read("lm_head.weight")));
  BOOST_TEST(SafetensorsCheckpoint::open(c.path()).names() == c.names());  // the index itself
  BOOST_TEST(SafetensorsCheckpoint::open(kDir + "/gpt2").path() == kDir + "/gpt2/model.safetensors");

  TempDir dir;
  const std::string shard = dir.file("a.safetensors");
  io::write_safetensors(shard, {{"x", Tensor::zeros({2})}});
  const std::string index = dir.write("model.safetensors.index.json", R"({"weight_map": {"y": "a.safetensors"}})");
  check_error([&] { SafetensorsCheckpoint::open(dir.path().string()); },
              {index, "puts tensor 'y' in 'a.safetensors', which has no such tensor"});
  dir.write("model.safetensors.index.json", R"({"weight_map": {"x": "b.safetensors"}})");
  check_error([&] { SafetensorsCheckpoint::open(index); },
              {index, "puts tensor 'x' in shard 'b.safetensors', which is missing"});
  dir.write("model.safetensors.index.json", R"({"metadata": {}})");
  check_error([&] { SafetensorsCheckpoint::open(index); }, {index, "is not a JSON object with a weight_map"});
  TempDir empty;
  check_error([&] { SafetensorsCheckpoint::open(empty.path().string()); },
              {"holds neither model.safetensors nor model.safetensors.index.json"});
}

// Shards as save_pretrained cuts them: in order, a shard closed before the tensor that would
// take it past the limit, a tensor over the limit alone; the index totals the tensors' bytes.
BOOST_AUTO_TEST_CASE(shards_are_cut_at_the_size_limit) {
  const io::NamedTensors tensors = {{"a", pattern({10}, DType::f32, 1)},   // 40 bytes
                                    {"b", pattern({5}, DType::f32, 2)},    // 20
                                    {"c", pattern({30}, DType::f32, 3)},   // 120: over the limit
                                    {"d", pattern({4}, DType::bf16, 4)}};  // 8
  TempDir dir;
  BOOST_TEST(io::write_safetensors_shards(dir.path().string(), tensors, {{"format", "pt"}}, 200) ==
             std::vector<std::string>{"model.safetensors"});
  std::filesystem::create_directories(dir.file("s"));
  const std::vector<std::string> files = io::write_safetensors_shards(dir.file("s"), tensors, {{"format", "pt"}}, 60);
  BOOST_TEST(files == (std::vector<std::string>{"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                                                "model-00003-of-00003.safetensors", "model.safetensors.index.json"}));
  const nlohmann::json index = nlohmann::json::parse(test::read_bytes(dir.file("s/model.safetensors.index.json")));
  BOOST_TEST(index["metadata"]["total_size"] == 188);
  BOOST_TEST(index["weight_map"] == nlohmann::json({{"a", "model-00001-of-00003.safetensors"},
                                                    {"b", "model-00001-of-00003.safetensors"},
                                                    {"c", "model-00002-of-00003.safetensors"},
                                                    {"d", "model-00003-of-00003.safetensors"}}));
  BOOST_TEST(SafetensorsFile::open(dir.file("s/model-00002-of-00003.safetensors")).metadata().at("format") == "pt");
  const SafetensorsCheckpoint c = SafetensorsCheckpoint::open(dir.file("s"));
  for (const auto& [name, t] : tensors) BOOST_TEST(same_bits(c.read(name), t), name);
  check_error([&] { io::write_safetensors_shards(dir.file("s"), tensors, {}, 0); },
              {"the shard size 0 is not positive"});
}

BOOST_AUTO_TEST_CASE(malformed_files_are_errors_naming_the_file_and_problem) {
  TempDir dir;
  const auto check = [&](const std::string& bytes, const std::string& problem) {
    const std::string path = dir.write("bad.safetensors", bytes);
    check_error([&] { SafetensorsFile::open(path); }, {path, problem});
  };
  const auto one = [](const std::string& entry) { return R"({"a": )" + entry + "}"; };
  check("abcd", "has 4 bytes, too short for the 8-byte header length");
  check(file_bytes("", 12).replace(0, 8, std::string("\xe8\x03\0\0\0\0\0\0", 8)),
        "its header length 1000 runs past the end of the file (20 bytes)");
  check(file_bytes("{\"a\": ", 0), "its header is not valid JSON");
  check(file_bytes("[1, 2]", 0), "its header is not a JSON object");
  check(file_bytes(one(R"({"dtype": "F17", "shape": [2], "data_offsets": [0, 8]})"), 8),
        "tensor 'a' has unknown dtype 'F17'");
  check(file_bytes(one(R"({"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 20]})"), 20),
        "tensor 'a' of shape [2,3] and dtype F32 needs 24 bytes; its data_offsets [0,20] hold 20");
  check(file_bytes(one(R"({"dtype": "F32", "shape": [100], "data_offsets": [0, 400]})"), 24),
        "tensor 'a' has data_offsets [0,400] outside the data section's 24 bytes");
  check(file_bytes(one(R"({"dtype": "F32", "shape": [0], "data_offsets": [8, 0]})"), 8),
        "data_offsets [8,0] that end before they begin");
  check(file_bytes(one(R"({"dtype": "F32", "shape": [-1], "data_offsets": [0, 0]})"), 0),
        "has shape [-1] (dimensions are integers");
  check(file_bytes(one(R"({"dtype": "F32", "shape": [2]})"), 8), "is not an object with dtype, shape and data_offsets");
  check(file_bytes(R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                       "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}})",
                   24),
        "tensors 'a' and 'b' overlap (bytes [8, 16) of the data)");
  check(file_bytes(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                       "b": {"dtype": "F32", "shape": [2], "data_offsets": [16, 24]}})",
                   24),
        "bytes [8, 16) of the data belong to no tensor");
  check(file_bytes(one(R"({"dtype": "F32", "shape": [4], "data_offsets": [0, 16]})"), 24),
        "bytes [16, 24) of the data belong to no tensor");
  check(file_bytes(R"({"__metadata__": {"format": 1}})", 0), "__metadata__ value 'format' is not a string");
  check_error([&] { SafetensorsFile::open(dir.file("missing.safetensors")); },
              {"cannot open safetensors file", "missing.safetensors"});

  // A well-formed tensor of a dtype triad does not compute in: listed, and refused when read.
  const std::string path =
      dir.write("mask.safetensors", file_bytes(one(R"({"dtype": "U8", "shape": [3], "data_offsets": [0, 3]})"), 3));
  const SafetensorsFile f = SafetensorsFile::open(path);
  BOOST_TEST(f.entry("a").dtype == "U8");
  check_error([&] { f.read("a"); }, {path, "tensor 'a'", "'U8' is not one triad reads"});
  check_error([&] { f.read("b"); }, {path, "has no tensor 'b'"});
}

BOOST_AUTO_TEST_CASE(the_writer_refuses_bad_tensors_and_keeps_the_old_file) {
  TempDir dir;
  const std::string path = dir.file("w.safetensors");
  io::write_safetensors(path, {{"x", Tensor::ones({2})}});
  const std::string before = test::read_bytes(path);
  check_error(
      [&] {
        io::write_safetensors(path, {{"i", Tensor::zeros({2}, DType::i64)}});
      },
      {"triad writes F64, F32, F16 and BF16, not i64"});
  check_error(
      [&] {
        io::write_safetensors(path, {{"x", Tensor::ones({2})}, {"x", Tensor::ones({2})}});
      },
      {path, "tensor name 'x' is empty, reserved or repeated"});
  BOOST_TEST(test::read_bytes(path) == before);
}

BOOST_AUTO_TEST_SUITE_END()  // test_safetensors
