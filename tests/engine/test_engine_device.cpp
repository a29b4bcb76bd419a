// The config's `device` where no GPU can be used: a build without the CUDA backend, or one
// with it on a machine (or under CUDA_VISIBLE_DEVICES) that shows no GPU. Asking for cuda
// must fail at once with an error naming the key and the reason; cpu trains as before.
// The training on a GPU itself is tests/cuda/test_train_cuda.cpp.
#include <boost/test/unit_test.hpp>
#include <cstdlib>

#include "cuda/runtime.h"
#include "engine/engine.h"
#include "support/check.h"
#include "support/training.h"
#include "triad.h"

// Hides every GPU from this process before anything starts the CUDA runtime (which reads
// the variable once), so the error paths run the same on machines with GPUs.
struct HideGpus {
  HideGpus() { setenv("CUDA_VISIBLE_DEVICES", "", 1); }
};

BOOST_AUTO_TEST_SUITE(test_engine_device, *boost::unit_test::fixture<HideGpus>())

using namespace triad;

namespace {

engine::TrainConfig config_on(const std::string& device, const std::string& distributed_backend = "auto") {
  nlohmann::json j = test::small_gpt_config("unused.bin", 1);
  j["device"] = device;
  j["distributed_backend"] = distributed_backend;
  return engine::parse_config(j);
}

// Why this build cannot train on a GPU here.
std::string reason() { return cuda::built() ? "no CUDA device is visible" : "this build of triad has no CUDA backend"; }

}  // namespace

BOOST_AUTO_TEST_CASE(cuda_without_a_gpu_is_a_config_error) {
  BOOST_TEST(cuda::device_count() == 0);
  for (const std::string device : {"cuda", "cuda:0", "cuda:3"}) {
    const std::string key = "[config] device \"" + device + "\": ";
    test::check_error([&] { engine::Engine e(config_on(device)); }, {key, reason()});
    test::check_error([&] { engine::training_device(device); }, {key, reason()});
  }
}

BOOST_AUTO_TEST_CASE(unknown_devices_name_the_key) {
  test::check_error([] { engine::training_device("gpu"); }, {"[config] device: ", "unknown device 'gpu'"});
  test::check_error([] { engine::training_device("cuda:x"); }, {"[config] device: ", "must be a number"});
}

BOOST_AUTO_TEST_CASE(cpu_trains_and_keeps_batches_on_the_host) {
  BOOST_TEST((engine::training_device("cpu") == Device::cpu()));
  engine::Engine e(config_on("cpu"));
  BOOST_TEST((e.device() == Device::cpu()));
  const Tensor x = Tensor::from_vector(std::vector<int64_t>(16 * 16, 3), {16, 16});
  const Tensor loss = e.forward(x, x);
  BOOST_TEST(loss.device().is_cpu());
  BOOST_TEST(std::isfinite(loss.item()));
  e.backward(loss);
  BOOST_TEST(std::isfinite(e.step().grad_norm));
}

// On the cpu ZeRO runs over the communicator the Engine is given (here none: a communicator
// of one); nccl there fails as the Engine is made, naming the key.
BOOST_AUTO_TEST_CASE(zero_on_the_cpu_runs_over_the_given_communicator) {
  for (const std::string backend : {"auto", "mpi"}) {
    engine::Engine e(config_on("cpu", backend));
    BOOST_TEST(e.zero_communicator()->name() == "counting(self)");
  }
  test::check_error([] { engine::Engine e(config_on("cpu", "nccl")); },
                    {"[config] distributed_backend \"nccl\": the device is cpu"});
}

// Crossing to a device that cannot be used is an error, never a silent host copy.
BOOST_AUTO_TEST_CASE(copies_to_an_unusable_device_fail) {
  const Tensor t = Tensor::ones({4});
  BOOST_CHECK_THROW(ops::to(t, Device::cuda(0)), Error);
  BOOST_TEST(ops::to(t, Device::cpu()).is_same(t));
}

// Index checks read a host copy: on the cpu the indices must be on the values' device too.
BOOST_AUTO_TEST_CASE(indices_out_of_range_name_the_op) {
  const Tensor w = Tensor::ones({4, 2});
  const Tensor bad = Tensor::from_vector(std::vector<int64_t>{0, 4}, {2});
  test::check_error([&] { ops::embedding(w, bad); }, {"embedding: index 4 at position 1", "out of range [0, 4)"});
  // With a zero row past the end the index 4 reads zeros; 5 is named with the range.
  const TableRows past_end = TableRows::zero_past_end(4);
  BOOST_TEST(ops::embedding(w, bad, past_end).to_vector<double>() == (std::vector<double>{1, 1, 0, 0}));
  const Tensor worse = Tensor::from_vector(std::vector<int64_t>{5}, {1});
  test::check_error([&] { ops::embedding(w, worse, past_end); }, {"embedding: index 5", "out of range [0, 5)"});
  // Rows 6.. of a vocabulary of 10: the index 9 reads row 3, 2 reads zeros, 10 is out of it.
  const Tensor part = Tensor::from_vector(std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8}, {4, 2});
  const Tensor some = Tensor::from_vector(std::vector<int64_t>{9, 2}, {2});
  BOOST_TEST(ops::embedding(part, some, {6, 10}).to_vector<double>() == (std::vector<double>{7, 8, 0, 0}));
  const Tensor beyond = Tensor::from_vector(std::vector<int64_t>{10}, {1});
  test::check_error([&] { ops::embedding(part, beyond, {6, 10}); }, {"embedding: index 10", "out of range [0, 10)"});
}

// Module::to keeps every parameter's handle (the optimizer and ZeRO hold them).
BOOST_AUTO_TEST_CASE(module_to_the_same_device_keeps_parameters) {
  nn::Linear lin(3, 2);
  const Tensor before = lin.weight;
  const std::vector<float> values = before.to_vector<float>();
  lin.to(Device::cpu());
  BOOST_TEST(lin.weight.is_same(before));
  BOOST_TEST(lin.weight.to_vector<float>() == values);
}

BOOST_AUTO_TEST_SUITE_END()  // test_engine_device
