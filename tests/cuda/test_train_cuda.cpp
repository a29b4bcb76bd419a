// Training on a GPU end to end through the Engine: one f32 step equals the CPU's step,
// bf16 mixed precision tracks the f32 loss curve, and a checkpoint saved from the GPU
// resumes on the CPU with every parameter and optimizer state bit for bit. Needs a GPU;
// without one the program reports itself skipped (gpu_test_main.h).
#define BOOST_TEST_MODULE train_cuda
#define BOOST_TEST_NO_MAIN  // main() is TRIAD_GPU_TEST_MAIN's
#include <cmath>
#include <cstring>

#include "cuda/gpu_test_main.h"
#include "checkpoint/checkpoint.h"
#include "engine/engine.h"
#include "parallel/self_communicator.h"
#include "support/check.h"
#include "support/files.h"
#include "support/training.h"
#include "triad.h"

TRIAD_GPU_TEST_MAIN()

using namespace triad;

namespace {

constexpr int64_t kVocab = 16, kSeq = 16, kBatch = 16;

// The small GPT of the training tests (parse_config never opens the corpus: batches come
// from make_batch) on `device`, storing parameters in `dtype`.
engine::TrainConfig train_config(const std::string& device, DType dtype, double eps = 1e-8) {
  nlohmann::json j = test::small_gpt_config("unused.bin", 50);
  j["device"] = device;
  j["optimizer"]["params"]["eps"] = eps;
  if (dtype == DType::bf16) j["bf16"] = {{"enabled", true}};
  // fp16: 2^20 overflows the first steps, a window of 3 doubles the scale back into more.
  if (dtype == DType::f16)
    j["fp16"] = {{"enabled", true}, {"initial_scale_power", 20}, {"loss_scale_window", 3}, {"hysteresis", 1}};
  return engine::parse_config(j);
}

// Batch `step` of a task with structure to learn and a floor to its loss: each next token
// follows the previous one by the full-period map t -> 5t + 3 (mod 16) with probability
// 1/2, else is drawn uniformly. The best loss is that mixture's entropy, about 1.96 nats
// (ln 16 = 2.77 at the start), so losses stay well away from 0 and a relative bound on
// them means the same throughout the run.
std::pair<Tensor, Tensor> make_batch(int64_t step) {
  std::vector<int64_t> seq(size_t(kBatch * (kSeq + 1)));
  for (int64_t b = 0; b < kBatch; ++b) {
    int64_t t = (b + 3 * step) % kVocab;
    for (int64_t i = 0; i <= kSeq; ++i) {
      seq[size_t(b * (kSeq + 1) + i)] = t;
      const uint64_t draw = random_bits(uint64_t(step), uint64_t(b * 1000 + i));
      t = draw % 2 == 0 ? (5 * t + 3) % kVocab : int64_t((draw >> 1) % uint64_t(kVocab));
    }
  }
  const Tensor all = Tensor::from_vector(seq, {kBatch, kSeq + 1});
  return {ops::contiguous(ops::narrow(all, 1, 0, kSeq)), ops::contiguous(ops::narrow(all, 1, 1, kSeq))};
}

// One optimizer step on batch `step`; returns the loss.
double train_step(engine::Engine& e, int64_t step) {
  const auto [x, y] = make_batch(step);
  const Tensor loss = e.forward(x, y);
  const double value = loss.item();
  e.backward(loss);
  e.step();
  return value;
}

Tensor on_host(const Tensor& t) { return ops::to(t, Device::cpu()); }

// Every element of a and b (any devices, one dtype) has the same bits.
bool same_bits(const Tensor& a, const Tensor& b) {
  const Tensor ha = ops::contiguous(on_host(a)), hb = ops::contiguous(on_host(b));
  return ha.shape() == hb.shape() && ha.dtype() == hb.dtype() &&
         std::memcmp(ha.raw_data(), hb.raw_data(), ha.nbytes()) == 0;
}

}  // namespace

BOOST_AUTO_TEST_CASE(engine_trains_on_the_gpu) {
  engine::Engine e(train_config("cuda", DType::f32));
  BOOST_TEST(e.device().is_cuda());
  for (const auto& [name, p] : e.model().named_parameters())
    BOOST_CHECK_MESSAGE(p.device().is_cuda() && p.dtype() == DType::f32, name << " is " << p.str());
  const double first = train_step(e, 0);
  BOOST_TEST(std::abs(first - std::log(double(kVocab))) < 0.2);  // near-uniform logits at the start
  double recent = 0;  // the mean of the last 5 of 20 steps' losses (batches differ: one is noisy)
  for (int64_t s = 1; s < 20; ++s) {
    const double loss = train_step(e, s);
    if (s >= 15) recent += loss / 5;
  }
  BOOST_TEST(recent < first - 0.2, "loss " << first << " at the start, " << recent << " after 20 steps");
  for (const auto& [name, p] : e.model().named_parameters())
    BOOST_CHECK_MESSAGE(grad(p).defined() && grad(p).device().is_cuda(), name << ": gradient not on the GPU");
}

// In f32 the GPU computes what the CPU does (cuBLASLt without TF32, f32 kernels after the
// CPU's): the loss, the gradient norm and every parameter after one AdamW step agree to
// 1e-4 relative. Adam's first step moves each weight by lr g / (|g| + eps): with the usual
// eps of 1e-8, a gradient as small as its own rounding noise (sums that cancel) moves its
// weight by a full lr one way on one device and the other way on the other. eps = 1e-3
// makes such steps proportional to g, so the comparison measures the kernels, not signs.
BOOST_AUTO_TEST_CASE(f32_step_equals_the_cpu_step) {
  engine::Engine gpu(train_config("cuda", DType::f32, 1e-3));
  engine::Engine cpu(train_config("cpu", DType::f32, 1e-3));
  const auto [x, y] = make_batch(0);
  const Tensor loss_gpu = gpu.forward(x, y), loss_cpu = cpu.forward(x, y);
  BOOST_TEST(loss_gpu.device().is_cuda());
  const double lg = loss_gpu.item(), lc = loss_cpu.item();
  BOOST_TEST(std::abs(lg - lc) <= 1e-4 * std::abs(lc), "loss: gpu " << lg << ", cpu " << lc);
  gpu.backward(loss_gpu);
  cpu.backward(loss_cpu);
  const engine::StepResult rg = gpu.step(), rc = cpu.step();
  BOOST_TEST(std::abs(rg.grad_norm - rc.grad_norm) <= 1e-4 * rc.grad_norm,
             "gradient norm: gpu " << rg.grad_norm << ", cpu " << rc.grad_norm);
  const auto pg = gpu.model().named_parameters(), pc = cpu.model().named_parameters();
  BOOST_REQUIRE(pg.size() == pc.size());
  for (size_t i = 0; i < pg.size(); ++i) {
    const double err = test::relative_error(on_host(pg[i].second), pc[i].second);
    BOOST_CHECK_MESSAGE(err <= 1e-4, pg[i].first << ": relative error " << err);
  }
}

// bf16 mixed precision on the GPU (parameters and gradients in bf16, products on tensor
// cores with f32 accumulation, f32 master weights) against f32 on the GPU over 50 steps:
// every loss within 2% of the f32 run's. bf16 keeps 8 significant bits, so each stored
// weight and each narrowed GEMM operand is off by up to 2^-9 (0.2%) relative; these
// errors are independent across the sums of a product and partly cancel, and the f32
// master weights keep them from piling up over steps. On the CPU, where only the stored
// weights are rounded, these 50 steps stay within 0.02% of f32; the GPU also rounds the
// products' operands, errors of the same kind and size, so its curve should stay within
// a few tenths of a percent. 2% leaves room for the two trajectories drifting apart and
// still catches a real fault (a gradient lost in rounding, master weights rounded to bf16,
// a product in the wrong dtype), any of which moves a 50-step curve by more.
BOOST_AUTO_TEST_CASE(bf16_tracks_the_f32_loss_curve) {
  engine::Engine f32(train_config("cuda", DType::f32));
  engine::Engine bf16(train_config("cuda", DType::bf16));
  for (const auto& [name, p] : bf16.model().named_parameters())
    BOOST_CHECK_MESSAGE(p.device().is_cuda() && p.dtype() == DType::bf16, name << " is " << p.str());
  double first = 0, last = 0;
  for (int64_t s = 0; s < 50; ++s) {
    const double l32 = train_step(f32, s), l16 = train_step(bf16, s);
    BOOST_CHECK_MESSAGE(std::abs(l16 - l32) <= 0.02 * l32, "step " << s << ": bf16 loss " << l16 << ", f32 " << l32);
    if (s == 0) first = l32;
    last = l32;
  }
  BOOST_TEST(last < first - 0.2);  // the curve being tracked does fall
}

// Note [Recorded steps]: with cuda_graph.enabled (one warmup step) the steps after the
// first replay one recording; each computes what the plain step computes on its batch (the
// losses and norms within 1e-5, bit for bit where the kernels are deterministic), with the
// schedule's rate, in f32, bf16 and fp16 (whose overflow verdicts and scales, decided on the
// device, agree); and after 12 steps every parameter agrees.
BOOST_AUTO_TEST_CASE(recorded_steps_equal_the_plain_steps) {
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    engine::TrainConfig c = train_config("cuda", dtype);
    engine::Engine plain(c);
    c.cuda_graph = {.enabled = true, .warmup_steps = 1};
    engine::Engine recorded(c);
    for (int64_t s = 0; s < 12; ++s) {
      const auto [x, y] = make_batch(s);
      const engine::TrainStep a = plain.train_step({x}, {y}), b = recorded.train_step({x}, {y});
      const double la = on_host(a.losses).item(), lb = on_host(b.losses).item();
      const engine::StepResult ra = a.queued.read(), rb = b.queued.read();
      const double na = ra.grad_norm, nb = rb.grad_norm;
      BOOST_CHECK_MESSAGE(std::abs(lb - la) <= 1e-5 * la && (std::abs(nb - na) <= 1e-5 * na || ra.skipped),
                          dtype_name(dtype) << " step " << s << ": loss " << lb << " recorded, " << la
                                            << " plain; norm " << nb << ", " << na);
      BOOST_TEST(b.queued.step == s + 1);
      BOOST_TEST(rb.lr == ra.lr);
      BOOST_TEST(rb.skipped == ra.skipped);  // fp16: the verdict and the scale, on the device
      BOOST_TEST(rb.loss_scale == ra.loss_scale);
      BOOST_TEST(b.activation_peak.has_value() == (s >= 2));  // replays from the third step on
    }
    BOOST_TEST(recorded.zero()->counters().steps == plain.zero()->counters().steps);
    const auto want = plain.model().named_parameters(), got = recorded.model().named_parameters();
    for (size_t i = 0; i < want.size(); ++i)
      BOOST_CHECK_MESSAGE(test::max_abs_diff(on_host(got[i].second), on_host(want[i].second)) <= 1e-4,
                          dtype_name(dtype) << " " << want[i].first << " differs after 12 steps");
  }
}

// Saved from the GPU, resumed on the CPU: the checkpoint holds the device's values, and
// the CPU engine reads back every parameter, master weight and moment bit for bit.
BOOST_AUTO_TEST_CASE(checkpoint_from_the_gpu_resumes_on_the_cpu) {
  for (DType dtype : {DType::f32, DType::bf16}) {
    BOOST_TEST_CONTEXT("dtype " << dtype_name(dtype)) {
      test::TempDir dir;
      const std::string path = dir.file("step-3.h5");
      parallel::SelfCommunicator self;
      engine::Engine gpu(train_config("cuda", dtype));
      for (int64_t s = 0; s < 3; ++s) train_step(gpu, s);
      engine::save_checkpoint(path, gpu, self);

      engine::Engine cpu(train_config("cpu", dtype));
      engine::load_checkpoint(path, cpu, self);
      BOOST_TEST(cpu.global_step() == 3);
      const auto pg = gpu.model().named_parameters(), pc = cpu.model().named_parameters();
      BOOST_REQUIRE(pg.size() == pc.size());
      for (size_t i = 0; i < pg.size(); ++i) {
        BOOST_TEST((pc[i].second.dtype() == dtype));
        BOOST_CHECK_MESSAGE(same_bits(pg[i].second, pc[i].second), pg[i].first << " differs");
      }
      using State = zero::ZeroOptimizer::State;
      for (State state : {State::master, State::exp_avg, State::exp_avg_sq}) {
        const auto sg = gpu.zero()->state_view(state).owned_slices(), sc = cpu.zero()->state_view(state).owned_slices();
        BOOST_REQUIRE(sg.size() == sc.size());
        for (size_t i = 0; i < sg.size(); ++i)
          BOOST_CHECK_MESSAGE(same_bits(sg[i].values, sc[i].values),
                              sg[i].name << ": optimizer state " << int(state) << " differs");
      }
      // And the CPU run continues from there as the GPU run does: in f32 as closely as one
      // step compares; in bf16 within the curve-tracking bound, since the GPU narrows
      // activations for its products where the CPU widens parameters (Note [16-bit
      // parameters]).
      const double lg = train_step(gpu, 3), lc = train_step(cpu, 3);
      const double bound = dtype == DType::f32 ? 1e-4 : 0.02;
      BOOST_TEST(std::abs(lg - lc) <= bound * lc, "loss after resuming: gpu " << lg << ", cpu " << lc);
    }
  }
}
