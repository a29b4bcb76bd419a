// The CUDA backend's elementwise kernels (cuda/backend/elementwise_kernels.cuh) run on the CPU
// under an emulation of CUDA (cuda/cuda_emulation.h): the ops IEEE arithmetic rounds exactly
// (+, -, x, /, negation, square root, the scalar forms) give the CPU backend's values bit for
// bit, in f32 and in f64 (the scalars a step keeps on the device: the gradient norm's root, the
// loss scale's seed), over broadcast and strided operands.
#include <boost/test/unit_test.hpp>
#include <cmath>

#include "cuda/cuda_emulation.h"
// The emulation comes first: the kernels' header takes the builtins from it.
#include "cuda/backend/elementwise_kernels.cuh"
#include "support/check.h"
#include "tensor/ops.h"
#include "tensor/random.h"

using namespace triad;

namespace {

Tensor elementwise_uniform(const Shape& shape, uint64_t seed, double lo, double hi, DType dt) {
  Tensor t = Tensor::empty(shape, DType::f64);
  Generator g(seed);
  ops::uniform_(t, lo, hi, g);
  return ops::to(t, dt);
}

cuda::Floats elementwise_floats(const Tensor& t) { return {t.raw_data(), t.dtype()}; }

// out = f(a, b) by the kernel of a's dtype (f32 through Floats, f64 as doubles).
template <class F>
Tensor run_map2(const Tensor& a, const Tensor& b, F f) {
  const Tensor out = Tensor::empty(a.shape(), a.dtype());
  const int64_t n = out.numel();
  const cuda::Strided<3> g = cuda::make_strided<3>(out.shape(), {&out.strides(), &a.strides(), &b.strides()}, "map2");
  emulation::launch(3, 1, 64, [&] {
    if (a.dtype() == DType::f64)
      cuda::map2_f64_kernel(n, g, out.data<double>(), a.data<double>(), b.data<double>(), f);
    else
      cuda::map2_kernel(n, g, elementwise_floats(out), elementwise_floats(a), elementwise_floats(b), f);
  });
  return out;
}

template <class F>
Tensor run_map1(const Tensor& a, F f) {
  const Tensor out = Tensor::empty(a.shape(), a.dtype());
  const int64_t n = out.numel();
  const cuda::Strided<2> g = cuda::make_strided<2>(out.shape(), {&out.strides(), &a.strides()}, "map1");
  emulation::launch(3, 1, 64, [&] {
    if (a.dtype() == DType::f64)
      cuda::map1_f64_kernel(n, g, out.data<double>(), a.data<double>(), f);
    else
      cuda::map1_kernel(n, g, elementwise_floats(out), elementwise_floats(a), f);
  });
  return out;
}

}  // namespace

BOOST_AUTO_TEST_CASE(exact_elementwise_ops_match_the_cpu_in_f32_and_f64) {
  for (DType dt : {DType::f32, DType::f64}) {
    BOOST_TEST_CONTEXT(dtype_name(dt)) {
      // a (5, 7) read transposed from (7, 5) storage; b a row broadcast over a's rows.
      const Tensor a = ops::transpose(elementwise_uniform({7, 5}, 1, 0.5, 4.0, dt), 0, 1);
      const Tensor b = ops::expand(elementwise_uniform({1, 7}, 2, -3.0, 3.0, dt), {5, 7});
      const auto same = [](const Tensor& got, const Tensor& want, const char* op) {
        BOOST_TEST(test::max_abs_diff(got, want) == 0.0, op);
      };
      same(run_map2(a, b, cuda::Add{}), ops::add(a, b), "add");
      same(run_map2(a, b, cuda::Sub{}), ops::sub(a, b), "sub");
      same(run_map2(a, b, cuda::Mul{}), ops::mul(a, b), "mul");
      same(run_map2(a, b, cuda::Div{}), ops::div(a, b), "div");
      same(run_map1(a, cuda::Neg{}), ops::neg(a), "neg");
      same(run_map1(a, cuda::Sqrt{}), ops::sqrt(a), "sqrt");
      const double third = 1.0 / 3.0;  // rounded to the dtype, as each backend rounds it
      if (dt == DType::f64) {
        same(run_map1(a, cuda::Scale<double>{third}), ops::mul(a, third), "scale");
        same(run_map1(a, cuda::AddScalar<double>{third}), ops::add(a, third), "add_scalar");
      } else {
        same(run_map1(a, cuda::Scale<float>{float(third)}), ops::mul(a, third), "scale");
        same(run_map1(a, cuda::AddScalar<float>{float(third)}), ops::add(a, third), "add_scalar");
      }
    }
  }
  // f64 keeps what f32 would round away: 1 + 2^-40 is not 1.
  const Tensor one = Tensor::full({1}, 1.0, DType::f64), tiny = Tensor::full({1}, 0x1p-40, DType::f64);
  BOOST_TEST(run_map2(one, tiny, cuda::Add{}).item() == 1.0 + 0x1p-40);
  BOOST_TEST(run_map1(Tensor::full({1}, 2.0, DType::f64), cuda::Sqrt{}).item() == std::sqrt(2.0));
}
