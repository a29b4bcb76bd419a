// A model of one's own, pipelined: a residual MLP that learns y = sin(x), written as a list
// of layers (nn::LayerList) and handed to the Engine, which cuts it into pipeline stages
// and runs everything else the config says (AdamW, clipping, ZeRO, the schedule). Run it
// in one process or under mpirun; every layout trains the same model (the losses agree to
// rounding: data-parallel ranks sum gradients in another order):
//   ./build/bin/pipeline_mlp                 one process
//   mpirun -np 2 ./build/bin/pipeline_mlp    2 pipeline stages
//   mpirun -np 4 ./build/bin/pipeline_mlp    2 stages x 2 data-parallel ranks, ZeRO 1
#include <cmath>
#include <cstdio>
#include <vector>

#include "engine/engine.h"
#include "parallel/process_grid.h"
#include "parallel/runtime.h"
#include "triad.h"

using namespace triad;

constexpr int64_t kHidden = 64, kBatch = 64, kMicro = 4;

// x + fc2(gelu(fc1(x))): one layer of the list.
class Residual : public nn::Module {
 public:
  explicit Residual(Generator& gen) : Module("Residual") {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(kHidden, 4 * kHidden, true, gen));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(4 * kHidden, kHidden, true, gen));
  }
  Tensor forward(const Tensor& x) override { return x + (*fc2)(gelu((*fc1)(x))); }

 private:
  std::shared_ptr<nn::Linear> fc1, fc2;
};

// x (B, 1) -> Linear -> 4 Residual -> Linear -> y (B, 1), mean squared error. Each layer
// draws its initial values from a generator of its own seed, so a stage holding any of
// them starts from the same values as one process holding all.
nn::LayerList sine_model() {
  nn::LayerList list;
  const auto linear = [](int64_t in, int64_t out, uint64_t seed) {
    return [=](const nn::TiedModules&) -> nn::ModulePtr {
      Generator gen(seed);
      return std::make_shared<nn::Linear>(in, out, true, gen);
    };
  };
  list.layers.push_back({"in", "Linear", 2 * kHidden, {}, linear(1, kHidden, 1)});
  for (int i = 0; i < 4; ++i)
    list.layers.push_back({"res." + std::to_string(i),
                           "Residual",
                           8 * kHidden * kHidden + 5 * kHidden,
                           {},
                           [i](const nn::TiedModules&) -> nn::ModulePtr {
                             Generator gen(100 + uint64_t(i));
                             return std::make_shared<Residual>(gen);
                           }});
  list.layers.push_back({"out", "Linear", kHidden + 1, {}, linear(kHidden, 1, 2)});
  list.loss = [](const Tensor& y, const Tensor& target) { return mean((y - target) * (y - target)); };
  return list;
}

int main(int argc, char** argv) {
  const parallel::CommunicatorPtr world = parallel::launched_by_mpirun() ? parallel::init(argc, argv) : nullptr;
  const int ranks = world ? world->size() : 1;
  try {
    const nlohmann::json json = {{"pipeline", {{"stages", ranks >= 2 ? 2 : 1}, {"schedule", "1f1b"}}},
                                 {"train_batch_size", kBatch},
                                 {"gradient_accumulation_steps", kMicro},
                                 {"steps", 200},
                                 {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 1e-3}, {"weight_decay", 0.0}}}}},
                                 {"gradient_clipping", 1.0},
                                 {"zero_optimization", {{"stage", 1}}}};
    const nn::LayerList layers = sine_model();
    const engine::TrainConfig c = engine::parse_config(json, ranks, layers);
    const engine::GridPtr grid = engine::process_grid(c, world);
    engine::Engine engine(c, layers, grid);
    // The same kBatch points every step; data-parallel rank r takes rows of each micro-batch.
    const int dp = int(c.data_parallel), r = grid->dp_rank();
    const int64_t rows = kBatch / (kMicro * dp);
    std::vector<Tensor> inputs, targets;
    for (int64_t m = 0; m < kMicro; ++m) {
      std::vector<float> xs, ys;
      for (int64_t i = 0; i < rows; ++i) {
        const double x = -M_PI + 2 * M_PI * double((m * dp + r) * rows + i) / double(kBatch - 1);
        xs.push_back(float(x)), ys.push_back(float(std::sin(x)));
      }
      inputs.push_back(Tensor::from_vector(xs, {rows, 1})), targets.push_back(Tensor::from_vector(ys, {rows, 1}));
    }
    for (int64_t step = 1; step <= c.steps; ++step) {
      double loss = 0;  // this rank's mean over its rows
      if (engine.pipelined()) {
        loss = ops::sum(engine.forward_backward(inputs, targets)).item() / double(kMicro);
      } else {
        for (int64_t m = 0; m < kMicro; ++m) {
          const Tensor l = engine.forward(inputs[size_t(m)], targets[size_t(m)]);
          engine.backward(l);
          loss += l.item() / double(kMicro);
        }
      }
      engine.step();
      Tensor mean_loss = Tensor::full({1}, loss / double(dp), DType::f64);
      grid->dp()->all_reduce(mean_loss)->wait();
      if (step % 50 == 0 && parallel::world_rank() == 0)
        std::printf("step %3lld  mse %.6f\n", (long long)step, mean_loss.item());
    }
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "rank %d: error: %s\n", parallel::world_rank(), ex.what());
    parallel::abort_job(1);
  }
  parallel::finalize();
  return 0;
}
