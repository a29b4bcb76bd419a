// The CUDA backend's fused transformer-block kernels (cuda/backend/fused_kernels.cuh: bias
// and GELU after a product, GELU's backward with the bias gradient, SwiGLU, the residual
// add fused into layer norm and RMS norm, the rotary embedding) run on the CPU under an
// emulation of CUDA (cuda/cuda_emulation.h), against the CPU backend's fused ops in f32,
// bf16 and f16. What the two devices round the same way is compared bit for bit (a
// pre-activation, a residual sum, the rotary embedding); the rest within the distance
// between the GPU's tanhf and the CPU's vector tanh, and between their summation orders.
// The cuBLASLt epilogue path and the kernels' speed need a GPU (test_backend_cuda).
#include <boost/test/unit_test.hpp>
#include <cmath>

#include "cuda/cuda_emulation.h"
// The emulation comes first: the kernels' header takes the builtins from it.
#include "cuda/backend/fused_kernels.cuh"
#include "support/check.h"
#include "tensor/ops.h"
#include "tensor/random.h"

using namespace triad;

namespace {

const DType kDtypes[] = {DType::f32, DType::bf16, DType::f16};

Tensor uniform(const Shape& shape, uint64_t seed, double scale, DType dt) {
  Tensor t = Tensor::empty(shape);
  Generator g(seed);
  ops::uniform_(t, -scale, scale, g);
  return ops::to(t, dt);
}

// t as a kernel operand (the backend's floats() without its dtype check).
cuda::Floats floats(const Tensor& t) { return {t.raw_data(), t.dtype()}; }

// Within a few f32 ulps for f32; one unit of the last place of a 16-bit dtype (a value at a
// rounding boundary may round the other way) relative to the reference's scale.
double tolerance(DType dt) { return dt == DType::f32 ? 2e-6 : (dt == DType::bf16 ? 8e-3 : 1e-3); }

void close(const Tensor& got, const Tensor& want, DType dt, const std::string& what) {
  BOOST_TEST(test::relative_error(got, want) <= tolerance(dt), what);
}

void same(const Tensor& got, const Tensor& want, const std::string& what) {
  BOOST_TEST(test::max_abs_diff(got, want) == 0.0, what);
}

}  // namespace

// pre = product + bias bit for bit (the CPU's linear adds its bias to the f32 product the
// same way); GELU of the unrounded sum within tanh's distance.
BOOST_AUTO_TEST_CASE(bias_gelu_matches_the_cpu_linear_gelu) {
  const int64_t rows = 7, k = 12, n = 36;
  for (DType dt : kDtypes)
    for (bool with_bias : {true, false}) {
      const std::string what = std::string(dtype_name(dt)) + (with_bias ? " bias" : " no bias");
      const Tensor x = uniform({rows, k}, 1, 1.0, dt), w = uniform({n, k}, 2, 1.0, dt);
      const Tensor bias = with_bias ? uniform({n}, 3, 1.0, dt) : Tensor();
      const ops::LinearGeluOut want = ops::linear_gelu(x, w, bias);
      const Tensor product = ops::linear(ops::to(x, DType::f32), ops::to(w, DType::f32), Tensor());
      Tensor pre = Tensor::empty({rows, n}, dt), out = Tensor::empty({rows, n}, dt);
      emulation::launch(2, 1, 64, [&] {
        cuda::bias_gelu_kernel(product.data<float>(), with_bias ? floats(bias) : cuda::Floats{}, floats(pre),
                               floats(out), rows * n, n);
      });
      same(pre, want.pre, what + " pre");
      close(out, want.y, dt, what + " gelu");
    }
}

// grad_pre within tanh's distance of the CPU's; each bias entry the sum of the kernel's own
// grad_pre column, over chunks of rows then over chunks.
BOOST_AUTO_TEST_CASE(gelu_bias_backward_matches_the_cpu) {
  const int64_t rows = 70, n = 40, chunks = 3, len = (rows + chunks - 1) / chunks;
  for (DType dt : kDtypes) {
    const std::string what = dtype_name(dt);
    const Tensor pre = uniform({rows, n}, 4, 3.0, dt), g = uniform({rows, n}, 5, 1.0, dt);
    const ops::GeluBiasGrads want = ops::gelu_bias_backward(pre, g, true);
    Tensor grad_pre = Tensor::empty({rows, n}, dt), partial = Tensor::empty({chunks, n});
    Tensor grad_bias = Tensor::empty({n}, dt);
    emulation::launch(1, unsigned(chunks), 64, [&] {
      cuda::gelu_bias_backward_kernel(floats(pre), floats(g), floats(grad_pre), partial.data<float>(), rows, n, len);
    });
    emulation::launch(1, 1, 64, [&] { cuda::column_sum_kernel(partial.data<float>(), floats(grad_bias), chunks, n); });
    close(grad_pre, want.grad_pre, dt, what + " grad_pre");
    close(grad_bias, ops::sum(ops::to(grad_pre, DType::f32), 0), dt, what + " grad_bias of the kernel's grad_pre");
    close(grad_bias, want.grad_bias, dt, what + " grad_bias against the CPU");
    // Without a bias gradient the kernel writes grad_pre alone.
    Tensor alone = Tensor::empty({rows, n}, dt);
    emulation::launch(1, unsigned(chunks), 64, [&] {
      cuda::gelu_bias_backward_kernel(floats(pre), floats(g), floats(alone), nullptr, rows, n, len);
    });
    same(alone, grad_pre, what + " grad_pre without the bias");
  }
}

BOOST_AUTO_TEST_CASE(swiglu_matches_the_cpu) {
  const int64_t total = 300;
  for (DType dt : kDtypes) {
    const std::string what = dtype_name(dt);
    const Tensor a = uniform({total}, 6, 4.0, dt), b = uniform({total}, 7, 2.0, dt), g = uniform({total}, 8, 1.0, dt);
    Tensor out = Tensor::empty({total}, dt), da = Tensor::empty({total}, dt), db = Tensor::empty({total}, dt);
    emulation::launch(2, 1, 64, [&] { cuda::swiglu_kernel(floats(a), floats(b), floats(out), total); });
    emulation::launch(2, 1, 64, [&] {
      cuda::swiglu_backward_kernel(floats(a), floats(b), floats(g), floats(da), floats(db), total);
    });
    const ops::SwigluGrads want = ops::swiglu_backward(a, b, g);
    close(out, ops::swiglu(a, b), dt, what + " swiglu");
    close(da, want.da, dt, what + " da");
    close(db, want.db, dt, what + " db");
  }
}

// The rotary embedding and its backward bit for bit: both devices run tensor/rotary_math.h's
// fused multiply-adds on the same f32 values and round once. x a view with strides (a
// projection's heads; then features strided too, with per-row tables); 120 feature pairs
// over 64 threads, so the grid-stride loop turns; pairs indexed in 32 and 64 bits.
BOOST_AUTO_TEST_CASE(rotary_matches_the_cpu_bit_for_bit) {
  for (DType dt : kDtypes)
    for (bool per_row : {false, true})
      for (bool backward : {false, true})
        for (bool wide_index : {false, true}) {
          const std::string what = std::string(dtype_name(dt)) + (per_row ? " per-row tables" : "") +
                                   (backward ? " backward" : "") + (wide_index ? " int64 index" : "");
          const Tensor x = per_row ? ops::transpose(uniform({2, 3, 8, 5}, 13, 2.0, dt), 2, 3)
                                   : ops::transpose(uniform({2, 5, 3, 8}, 14, 2.0, dt), 1, 2);
          const Shape table = per_row ? Shape{2, 1, 5, 8} : Shape{5, 8};
          const Tensor cos = uniform(table, 15, 1.0, DType::f32), sin = uniform(table, 16, 1.0, DType::f32);
          // out as ops::rotary lays it out for x: by position where x's heads are adjacent
          const Tensor out = per_row ? Tensor::empty({2, 3, 5, 8}, dt)
                                     : ops::transpose(Tensor::empty({2, 5, 3, 8}, dt), 1, 2);
          const cuda::RotaryShape shape{3,       5, 8, {x.stride(0), x.stride(1), x.stride(2), x.stride(3)},
                                        per_row, {out.stride(0), out.stride(1), out.stride(2)}};
          const int64_t pairs = 2 * 3 * 5 * 4;
          emulation::launch(1, 1, 64, [&] {
            if (wide_index)
              cuda::rotary_kernel(floats(x), shape, floats(cos), floats(sin), floats(out), pairs, backward);
            else
              cuda::rotary_kernel(floats(x), shape, floats(cos), floats(sin), floats(out), uint32_t(pairs), backward);
          });
          same(out, backward ? ops::rotary_backward(x, cos, sin) : ops::rotary(x, cos, sin), what);
        }
}

// The sum bit for bit (one rounding of x + r on both devices); the norms within their
// summation orders' distance.
BOOST_AUTO_TEST_CASE(residual_add_norms_match_the_cpu) {
  const int64_t rows = 5, c = 300;
  for (DType dt : kDtypes) {
    const std::string what = dtype_name(dt);
    const Tensor x = uniform({rows, c}, 9, 2.0, dt), r = uniform({rows, c}, 10, 2.0, dt);
    const Tensor w = uniform({c}, 11, 1.0, dt), b = uniform({c}, 12, 1.0, dt);
    Tensor sum = Tensor::empty({rows, c}, dt), y = Tensor::empty({rows, c}, dt);
    Tensor mean = Tensor::empty({rows}), rstd = Tensor::empty({rows});
    emulation::launch(unsigned(rows), 1, 64, [&] {
      cuda::add_layer_norm_kernel(floats(x), floats(r), floats(w), floats(b), 1e-5f, floats(sum), floats(y),
                                  mean.data<float>(), rstd.data<float>(), c);
    });
    const ops::AddLayerNormOut ln = ops::add_layer_norm(x, r, w, b, 1e-5);
    same(sum, ln.sum, what + " add_layer_norm sum");
    close(y, ln.y, dt, what + " add_layer_norm y");
    close(mean, ln.mean, DType::f32, what + " add_layer_norm mean");
    close(rstd, ln.rstd, DType::f32, what + " add_layer_norm rstd");

    Tensor rsum = Tensor::empty({rows, c}, dt), ry = Tensor::empty({rows, c}, dt), rrstd = Tensor::empty({rows});
    emulation::launch(unsigned(rows), 1, 64, [&] {
      cuda::add_rms_norm_kernel(floats(x), floats(r), floats(w), 1e-5f, floats(rsum), floats(ry), rrstd.data<float>(),
                                c);
    });
    const ops::AddRmsNormOut rn = ops::add_rms_norm(x, r, w, 1e-5);
    same(rsum, rn.sum, what + " add_rms_norm sum");
    close(ry, rn.y, dt, what + " add_rms_norm y");
    close(rrstd, rn.rstd, DType::f32, what + " add_rms_norm rstd");
  }
}
