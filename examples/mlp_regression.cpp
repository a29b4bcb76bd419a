// A first triad model: a two-layer MLP that learns y = sin(x) on [-pi, pi].
//
// It shows the whole user-facing loop: define a Module subclass that registers its layers,
// write its forward with differentiable functions, then repeat zero_grad -> loss ->
// backward -> optimizer step. Run it: ./build/bin/mlp_regression
#include <cmath>
#include <cstdio>
#include <vector>

#include "triad.h"

using namespace triad;

// x (N, 1) -> Linear(1, H) -> GELU -> Linear(H, 1) -> y (N, 1).
class SineMLP : public nn::Module {
 public:
  explicit SineMLP(int64_t hidden) : Module("SineMLP") {
    // register_module names the children, so parameters come out as fc1.weight, fc1.bias, ...
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(1, hidden));
    act = register_module("act", std::make_shared<nn::GELU>());
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(hidden, 1));
  }

  Tensor forward(const Tensor& x) override { return (*fc2)((*act)((*fc1)(x))); }

 private:
  std::shared_ptr<nn::Linear> fc1, fc2;
  std::shared_ptr<nn::GELU> act;
};

int main() {
  // Training data: N evenly spaced points and their sines, as (N, 1) columns.
  const int64_t N = 256;
  std::vector<float> xs(N), ys(N);
  for (int64_t i = 0; i < N; ++i) {
    xs[i] = float(-M_PI + 2 * M_PI * double(i) / double(N - 1));
    ys[i] = std::sin(xs[i]);
  }
  const Tensor x = Tensor::from_vector(xs, {N, 1});
  const Tensor y = Tensor::from_vector(ys, {N, 1});

  default_generator().manual_seed(0);  // the Linear layers draw their init from it
  SineMLP model(64);
  std::printf("SineMLP: %lld parameters\n", (long long)model.num_parameters());
  for (const auto& [name, p] : model.named_parameters())
    std::printf("  %-10s %s\n", name.c_str(), shape_str(p.shape()).c_str());

  // No weight decay on this tiny problem; see optim::decay_groups for the GPT-style split.
  optim::AdamW opt({{model.parameters(), 0.0}}, {.lr = 1e-2});

  for (int step = 0; step <= 500; ++step) {
    opt.zero_grad();
    const Tensor err = model(x) - y;
    const Tensor loss = mean(err * err);  // mean squared error
    backward(loss);
    opt.step();
    if (step % 50 == 0) std::printf("step %4d  mse %.6f\n", step, loss.item());
  }

  // Evaluate without recording a tape.
  NoGradGuard no_grad;
  for (double v : {-2.0, -0.5, 1.0, 2.5}) {
    const double pred = model(Tensor::full({1, 1}, v)).item();
    std::printf("sin(%+.1f) = %+.4f, model says %+.4f\n", v, std::sin(v), pred);
  }
  return 0;
}
