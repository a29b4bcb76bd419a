// The CUDA backend's index kernels (cuda/backend/index_kernels.cuh: embedding, cross-entropy,
// the fused classifier's; cuda/backend/position_kernels.cuh: copy_at_ and increment_)
// run on the CPU under an emulation of CUDA (cuda/cuda_emulation.h): their values against
// the CPU backend or closed forms, and what they do with an index out of range (skip it,
// record it once for the next wait: Note [Deferred device errors]). The host side of the
// report, and the kernels' speed, need a GPU (test_backend_cuda).
#include <boost/test/unit_test.hpp>
#include <cmath>

#include "cuda/cuda_emulation.h"
// The emulation comes first: the kernels' header takes the builtins from it.
#include "cuda/backend/index_kernels.cuh"
#include "cuda/backend/position_kernels.cuh"
#include "tensor/backend.h"
#include "tensor/cpu/cpu_backend.h"
#include "tensor/ops.h"
#include "tensor/random.h"

using namespace triad;

namespace {

Tensor uniform(const Shape& shape, uint64_t seed, double low, double high) {
  Tensor t = Tensor::empty(shape);
  Generator g(seed);
  ops::uniform_(t, low, high, g);
  return t;
}

std::vector<int64_t> random_indices(int64_t n, int64_t limit, uint64_t seed) {
  std::vector<int64_t> v;
  for (double x : uniform({n}, seed, 0, double(limit)).to_vector<double>())
    v.push_back(std::min(int64_t(x), limit - 1));
  return v;
}

// t as a kernel operand (the backend's floats() without its dtype check).
cuda::Floats floats(const Tensor& t) { return {t.raw_data(), t.dtype()}; }

// max |a - b| in f32.
double test_max_diff(const Tensor& a, const Tensor& b) {
  return ops::max_abs(ops::sub(ops::to(a, DType::f32), ops::to(b, DType::f32)));
}

// A device's claim flag and record, in host memory.
struct Sink {
  unsigned claimed = 0;
  cuda::BadIndexRecord record{};
  cuda::BadIndexSink sink() { return {&claimed, &record}; }
};

void check_record(const Sink& s, cuda::IndexOp op, std::initializer_list<std::pair<int64_t, int64_t>> bad,
                  int64_t count, int64_t limit, const std::string& what) {
  BOOST_TEST_REQUIRE(s.record.found == 1, what << ": nothing recorded");
  BOOST_TEST(s.claimed == 1u);
  BOOST_TEST(s.record.op == int(op), what);
  bool listed = false;  // which bad index wins depends on the schedule
  for (const auto& [value, position] : bad)
    listed = listed || (s.record.value == value && s.record.position == position);
  BOOST_TEST(listed, what << ": recorded index " << s.record.value << " at " << s.record.position);
  BOOST_TEST(s.record.count == count);
  BOOST_TEST(s.record.limit == limit);
}

}  // namespace

// out[i] = w[idx[i]], a zero row for a bad index; gw[r] = sum of g[i] over idx[i] = r.
BOOST_AUTO_TEST_CASE(embedding_skips_and_records_bad_indices) {
  const int64_t v = 50, c = 40, n = 70;
  const Tensor w = uniform({v, c}, 1, -1, 1), g = uniform({n, c}, 2, -1, 1);
  const std::vector<float> pw = w.to_vector<float>(), pg = g.to_vector<float>();
  for (DType it : {DType::i64, DType::i32}) {
    std::vector<int64_t> idx = random_indices(n, v, 3);
    idx[17] = v;
    idx[30] = -3;
    const Tensor indices = ops::to(Tensor::from_vector(idx, {n}), it);
    const std::string what = std::string("embedding ") + dtype_name(it);

    Sink s;
    Tensor out = Tensor::full({n, c}, 7.0);
    emulation::launch(3, 1, 64, [&] {
      cuda::embedding_kernel(floats(w), indices.raw_data(), it == DType::i64, floats(out), n, c, v, 0, v, s.sink());
    });
    const std::vector<float> po = out.to_vector<float>();
    int64_t wrong = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < c; ++j) {
        const bool ok = idx[i] >= 0 && idx[i] < v;
        wrong += po[i * c + j] != (ok ? pw[idx[i] * c + j] : 0.0f);
      }
    BOOST_TEST(wrong == 0, what << ": " << wrong << " wrong elements");
    check_record(s, cuda::IndexOp::embedding, {{v, 17}, {-3, 30}}, n, v, what);

    Sink sb;
    Tensor gw = Tensor::zeros({v, c});
    emulation::launch(2, 1, 96, [&] {
      cuda::embedding_backward_kernel(floats(g), indices.raw_data(), it == DType::i64, gw.data<float>(), n, c, v, 0, v,
                                      sb.sink());
    });
    std::vector<double> want(size_t(v * c), 0.0);
    for (int64_t i = 0; i < n; ++i)
      if (idx[i] >= 0 && idx[i] < v)
        for (int64_t j = 0; j < c; ++j) want[idx[i] * c + j] += pg[i * c + j];
    const std::vector<float> got = gw.to_vector<float>();
    double err = 0;
    for (size_t k = 0; k < want.size(); ++k) err = std::max(err, std::fabs(got[k] - want[k]));
    BOOST_TEST(err < 1e-5, what << " backward: max error " << err);
    check_record(sb, cuda::IndexOp::embedding_backward, {{v, 17}, {-3, 30}}, n, v, what + " backward");
  }
}

// TableRows::zero_past_end (an MoE routing's empty slots and dropped choices): the index v
// reads a zero row and adds no gradient, unreported; the values equal the CPU backend's bit
// for bit (the gradient here hits each row once, so the atomics add in no particular order
// harmlessly), and a bad index is still recorded.
BOOST_AUTO_TEST_CASE(embedding_zero_past_end_reads_zeros) {
  const int64_t v = 50, c = 24, n = 40;
  const Tensor w = uniform({v, c}, 11, -1, 1), g = uniform({n, c}, 12, -1, 1);
  std::vector<int64_t> idx;  // distinct rows, every third past the end
  for (int64_t i = 0; i < n; ++i) idx.push_back(i % 3 == 0 ? v : (7 * i) % v);
  const Tensor indices = Tensor::from_vector(idx, {n});
  Sink s;
  Tensor out = Tensor::full({n, c}, 7.0);
  emulation::launch(3, 1, 64, [&] {
    cuda::embedding_kernel(floats(w), indices.raw_data(), true, floats(out), n, c, v, 0, v + 1, s.sink());
  });
  BOOST_TEST(s.record.found == 0);
  BOOST_TEST(out.to_vector<float>() == ops::embedding(w, indices, TableRows::zero_past_end(v)).to_vector<float>(),
             boost::test_tools::per_element());
  BOOST_TEST(ops::max_abs(ops::narrow(out, 0, 0, 1)) == 0.0);  // row 0 read index v
  Sink sb;
  Tensor gw = Tensor::zeros({v, c});
  emulation::launch(2, 1, 96, [&] {
    cuda::embedding_backward_kernel(floats(g), indices.raw_data(), true, gw.data<float>(), n, c, v, 0, v + 1,
                                    sb.sink());
  });
  BOOST_TEST(sb.record.found == 0);
  BOOST_TEST(
      gw.to_vector<float>() == ops::embedding_backward(g, indices, v, TableRows::zero_past_end(v)).to_vector<float>(),
      boost::test_tools::per_element());

  idx[5] = v + 1;  // past the zero row: bad
  const Tensor bad = Tensor::from_vector(idx, {n});
  Sink sbad;
  emulation::launch(3, 1, 64, [&] {
    cuda::embedding_kernel(floats(w), bad.raw_data(), true, floats(out), n, c, v, 0, v + 1, sbad.sink());
  });
  check_record(sbad, cuda::IndexOp::embedding, {{v + 1, 5}}, n, v + 1, "embedding zero_past_end");
}

// A vocab-parallel part (TableRows {first, vocab}): the table holds the rows [first,
// first + v) of a vocabulary of `vocab`; the indices there read their rows and take
// gradient, the others in the vocabulary read zeros and take none, unreported; the values
// equal the CPU backend's bit for bit, and an index outside the vocabulary is recorded
// against it.
BOOST_AUTO_TEST_CASE(embedding_of_a_vocabulary_part_reads_its_rows) {
  const int64_t v = 20, c = 24, n = 40, first = 20, vocab = 55;
  const TableRows part{first, vocab};
  const Tensor w = uniform({v, c}, 13, -1, 1), g = uniform({n, c}, 14, -1, 1);
  // Each row of the part once, then 20 distinct indices of the vocabulary (13 is prime to
  // 55): a row is hit at most twice, so the atomics' order leaves the sums' bits alone.
  std::vector<int64_t> idx;
  for (int64_t i = 0; i < n; ++i) idx.push_back(i < v ? first + (7 * i) % v : (13 * i) % vocab);
  const Tensor indices = Tensor::from_vector(idx, {n});
  Sink s;
  Tensor out = Tensor::full({n, c}, 7.0);
  emulation::launch(3, 1, 64, [&] {
    cuda::embedding_kernel(floats(w), indices.raw_data(), true, floats(out), n, c, v, first, vocab, s.sink());
  });
  BOOST_TEST(s.record.found == 0);
  const std::vector<float> po = out.to_vector<float>(), pw = w.to_vector<float>();
  int64_t wrong = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < c; ++j) {
      const bool held = idx[i] >= first && idx[i] < first + v;
      wrong += po[i * c + j] != (held ? pw[(idx[i] - first) * c + j] : 0.0f);
    }
  BOOST_TEST(wrong == 0, wrong << " wrong elements");
  BOOST_TEST(out.to_vector<float>() == ops::embedding(w, indices, part).to_vector<float>(),
             boost::test_tools::per_element());
  Sink sb;
  Tensor gw = Tensor::zeros({v, c});
  emulation::launch(2, 1, 96, [&] {
    cuda::embedding_backward_kernel(floats(g), indices.raw_data(), true, gw.data<float>(), n, c, v, first, vocab,
                                    sb.sink());
  });
  BOOST_TEST(sb.record.found == 0);
  BOOST_TEST(gw.to_vector<float>() == ops::embedding_backward(g, indices, v, part).to_vector<float>(),
             boost::test_tools::per_element());
  BOOST_TEST(ops::max_abs(gw) > 0.0);

  idx[3] = vocab;  // outside the vocabulary: bad
  idx[33] = -1;
  const Tensor bad = Tensor::from_vector(idx, {n});
  Sink sbad;
  emulation::launch(3, 1, 64, [&] {
    cuda::embedding_kernel(floats(w), bad.raw_data(), true, floats(out), n, c, v, first, vocab, sbad.sink());
  });
  check_record(sbad, cuda::IndexOp::embedding, {{vocab, 3}, {-1, 33}}, n, vocab, "embedding of a part");
}

// The rows' lse, their mean loss and count, and the backward, against the CPU backend on
// the same targets with the bad ones ignored (as the kernels treat them); one bad target
// is recorded. v = 3000 gives 512-thread blocks (16 warps in the block reductions). The rows
// are w >= v wide: the columns past v are a padded vocabulary's, which the softmax skips
// and whose gradient is zero (the target v, one past the classes, is a bad one).
BOOST_AUTO_TEST_CASE(cross_entropy_matches_the_cpu) {
  Backend& cpu = backend_for(Device::cpu());
  struct Shape3 {
    int64_t rows, v, w;
  };
  for (auto [rows, v, w] : {Shape3{37, 29, 29}, Shape3{3, 3000, 3000}, Shape3{37, 29, 40}, Shape3{3, 3000, 3072}}) {
    const std::string what =
        "cross_entropy " + std::to_string(rows) + " x " + std::to_string(v) + " of " + std::to_string(w);
    const Tensor logits = uniform({rows, w}, 4, -6, 6);
    std::vector<int64_t> t = random_indices(rows, v, 5), sane;
    for (int64_t r = 0; r < rows; r += 5) t[r] = -100;
    t[1] = v;
    if (rows > 23) t[23] = -7;
    for (int64_t x : t) sane.push_back(x >= 0 && x < v ? x : -100);
    const Tensor targets = Tensor::from_vector(t, {rows}), sane_targets = Tensor::from_vector(sane, {rows});

    Sink s;
    Tensor lse = Tensor::empty({rows}), row_loss = Tensor::empty({rows}, DType::f64);
    Tensor mean = Tensor::empty({}), count = Tensor::empty({}, DType::i64);
    emulation::launch(unsigned(rows), 1, unsigned(cuda::row_threads(v)), [&] {
      cuda::cross_entropy_kernel(floats(logits), targets.data<int64_t>(), lse.data<float>(), row_loss.data<double>(),
                                 rows, v, w, -100, s.sink());
    });
    emulation::launch(1, 1, 1024, [&] {
      cuda::cross_entropy_mean_kernel(row_loss.data<double>(), targets.data<int64_t>(), rows, v, -100,
                                      mean.data<float>(), count.data<int64_t>());
    });
    Tensor want_lse = Tensor::empty({rows}), want_mean = Tensor::empty({});
    Tensor want_count = Tensor::empty({}, DType::i64);
    cpu.cross_entropy(logits, sane_targets, want_lse, want_mean, want_count, -100, v);
    BOOST_TEST(ops::max_abs(ops::sub(lse, want_lse)) < 1e-5, what << " lse");
    BOOST_TEST(count.item() == want_count.item(), what << " count");
    BOOST_TEST(std::fabs(mean.item() - want_mean.item()) <= 1e-6 * std::fabs(want_mean.item()), what << " mean");
    check_record(s, cuda::IndexOp::cross_entropy, {{v, 1}, {-7, 23}}, rows, v, what);

    Sink sb;
    const Tensor grad_loss = Tensor::scalar(3.0, DType::f32);
    Tensor grad = Tensor::full({rows, w}, 7.0), want_grad = Tensor::full({rows, w}, 9.0);
    emulation::launch(unsigned(rows), 1, unsigned(cuda::row_threads(v)), [&] {
      cuda::classifier_grad_kernel(floats(logits), floats(grad), targets.data<int64_t>(), 0, v, w, v, -100,
                                 want_lse.data<float>(), grad_loss.data<float>(), count.data<int64_t>(), rows,
                                 sb.sink());
    });
    cpu.cross_entropy_backward(logits, sane_targets, want_lse, grad_loss, want_count, -100, v, want_grad);
    BOOST_TEST(ops::max_abs(ops::sub(grad, want_grad)) < 1e-6, what << " backward");
    if (w > v) BOOST_TEST(ops::max_abs(ops::narrow(grad, 1, v, w - v)) == 0.0, what << " padding gradient");
    check_record(sb, cuda::IndexOp::cross_entropy_backward, {{v, 1}, {-7, 23}}, rows, v, what + " backward");
  }
}

// A row's log-sum-exp is taken in one read (a running max per thread): logits of -inf (a
// masked vocabulary's) add nothing, also where they come before any finite one of the
// thread's; a row of -inf alone has lse -inf.
BOOST_AUTO_TEST_CASE(lse_skips_minus_infinity_logits) {
  Backend& cpu = backend_for(Device::cpu());
  const int64_t rows = 3, v = 300;
  std::vector<float> x = uniform({rows, v}, 8, -6, 6).to_vector<float>();
  for (int64_t j = 0; j < v; ++j) {
    if (j % 3 == 0 || j < 70) x[j] = -INFINITY;  // row 0: the first element of every thread, and more
    x[2 * v + j] = -INFINITY;                    // row 2: all
  }
  const Tensor logits = Tensor::from_vector(x, {rows, v});
  const Tensor targets = Tensor::from_vector(std::vector<int64_t>{-100, 5, -100}, {rows});
  Sink s;
  Tensor lse = Tensor::empty({rows}), row_loss = Tensor::empty({rows}, DType::f64);
  emulation::launch(unsigned(rows), 1, unsigned(cuda::row_threads(v)), [&] {
    cuda::cross_entropy_kernel(floats(logits), targets.data<int64_t>(), lse.data<float>(), row_loss.data<double>(),
                               rows, v, v, -100, s.sink());
  });
  Tensor want_lse = Tensor::empty({rows}), mean = Tensor::empty({}), count = Tensor::empty({}, DType::i64);
  cpu.cross_entropy(ops::narrow(logits, 0, 0, 2), ops::narrow(targets, 0, 0, 2), ops::narrow(want_lse, 0, 0, 2), mean,
                    count, -100, v);
  const std::vector<float> got = lse.to_vector<float>(), want = want_lse.to_vector<float>();
  for (int64_t r = 0; r < 2; ++r) BOOST_TEST(std::fabs(got[r] - want[r]) < 1e-5, "row " << r << ": " << got[r]);
  BOOST_TEST((std::isinf(got[2]) && got[2] < 0), "row of -inf: lse " << got[2]);
}

// The fused classifier's kernels (its rows' lse and target logit, their mean, the gradient
// in place) against the CPU backend, on parts of a vocabulary: the classes [first, first +
// v) of `vocab` in the first v of w columns, none on the last part. Targets on and off the
// part, ignored ones, and a bad one (vocab, recorded once; the CPU gets it ignored). f32
// and bf16 logits, the gradient of bf16 within one bf16 ulp of the CPU's.
BOOST_AUTO_TEST_CASE(classifier_kernels_match_the_cpu) {
  Backend& cpu = backend_for(Device::cpu());
  struct Part {
    int64_t rows, first, v, w, vocab;
  };
  for (DType dt : {DType::f32, DType::bf16})
    for (auto [rows, first, v, w, vocab] :
         {Part{37, 0, 29, 29, 29}, Part{37, 20, 29, 40, 60}, Part{3, 1000, 3000, 3072, 4000}, Part{5, 64, 0, 16, 50}}) {
      const std::string what = std::string("classifier ") + dtype_name(dt) + " " + std::to_string(rows) + " x [" +
                               std::to_string(first) + ", +" + std::to_string(v) + ") of " + std::to_string(w);
      const Tensor logits = ops::to(uniform({rows, w}, 4, -6, 6), dt);
      std::vector<int64_t> t = random_indices(rows, vocab, 5), sane;
      for (int64_t r = 0; r < rows; r += 5) t[size_t(r)] = -100;
      t[1] = vocab;
      for (int64_t x : t) sane.push_back(x >= 0 && x < vocab ? x : -100);
      const Tensor targets = Tensor::from_vector(t, {rows}), sane_targets = Tensor::from_vector(sane, {rows});

      Sink s;
      Tensor lse = Tensor::empty({rows}), z = Tensor::empty({rows}), mean = Tensor::empty({});
      Tensor count = Tensor::empty({}, DType::i64);
      emulation::launch(unsigned(rows), 1, unsigned(cuda::row_threads(std::max<int64_t>(v, 1))), [&] {
        cuda::classifier_rows_kernel(floats(logits), targets.data<int64_t>(), first, v, w, vocab, -100,
                                     lse.data<float>(), z.data<float>(), rows, s.sink());
      });
      emulation::launch(1, 1, 1024, [&] {
        cuda::classifier_loss_kernel(lse.data<float>(), z.data<float>(), targets.data<int64_t>(), rows, vocab, -100,
                                     mean.data<float>(), count.data<int64_t>());
      });
      Tensor want_lse = Tensor::empty({rows}), want_z = Tensor::empty({rows}), want_mean = Tensor::empty({});
      Tensor want_count = Tensor::empty({}, DType::i64);
      cpu.classifier_rows(logits, sane_targets, first, v, vocab, -100, want_lse, want_z);
      cpu.classifier_loss(want_lse, want_z, sane_targets, vocab, -100, want_mean, want_count);
      if (v == 0) {
        for (float l : lse.to_vector<float>()) BOOST_TEST((std::isinf(l) && l < 0), what << ": lse " << l);
      } else {
        BOOST_TEST(ops::max_abs(ops::sub(lse, want_lse)) < 1e-5, what << " lse");
        BOOST_TEST(std::fabs(mean.item() - want_mean.item()) <= 1e-6 * std::fabs(want_mean.item()), what << " mean");
      }
      BOOST_TEST(ops::max_abs(ops::sub(z, want_z)) == 0.0, what << " target logits");
      BOOST_TEST(count.item() == want_count.item(), what << " count");
      check_record(s, cuda::IndexOp::cross_entropy, {{vocab, 1}}, rows, vocab, what);

      // The gradient against a whole vocabulary's lse: this part's (or 0) plus up to 1.
      const Tensor whole_lse = ops::add(uniform({rows}, 6, 0, 1), v ? want_lse : Tensor::zeros({rows}));
      Sink sb;
      const Tensor grad_loss = Tensor::scalar(3.0, DType::f32);
      Tensor grad = ops::clone(logits), want = ops::clone(logits);
      emulation::launch(unsigned(rows), 1, unsigned(cuda::row_threads(w)), [&] {
        cuda::classifier_grad_kernel(floats(grad), floats(grad), targets.data<int64_t>(), first, v, w, vocab, -100,
                                     whole_lse.data<float>(), grad_loss.data<float>(), count.data<int64_t>(), rows,
                                     sb.sink());
      });
      cpu.classifier_grad(want, sane_targets, first, v, vocab, -100, whole_lse, grad_loss, want_count);
      const double tol = dt == DType::f32 ? 1e-6 : 0x1p-8 * ops::max_abs(want);
      BOOST_TEST(test_max_diff(grad, want) <= tol, what << " grad");
      if (w > v) BOOST_TEST(ops::max_abs(ops::narrow(grad, 1, v, w - v)) == 0.0, what << " padding gradient");
      check_record(sb, cuda::IndexOp::cross_entropy_backward, {{vocab, 1}}, rows, vocab, what + " grad");
    }
}

// bf16 logits (Note [16-bit activations]): the kernels load them as f32, so lse and the
// loss are the CPU's on the same (rounded) logits within f32 rounding, and the bf16
// gradient is the CPU's rounded once: within one bf16 ulp (2^-8 relative) of it, since the
// two f32 values before rounding differ only in their last bits. The embedding copies bf16
// rows exactly.
BOOST_AUTO_TEST_CASE(bf16_logits_and_rows_match_the_cpu) {
  Backend& cpu = backend_for(Device::cpu());
  const int64_t rows = 37, v = 29, w = 40;
  const Tensor logits = ops::to(uniform({rows, w}, 4, -6, 6), DType::bf16);
  std::vector<int64_t> t = random_indices(rows, v, 5);
  t[3] = -100;
  const Tensor targets = Tensor::from_vector(t, {rows});
  Sink s;
  Tensor lse = Tensor::empty({rows}), row_loss = Tensor::empty({rows}, DType::f64);
  Tensor mean = Tensor::empty({}), count = Tensor::empty({}, DType::i64);
  emulation::launch(unsigned(rows), 1, 64, [&] {
    cuda::cross_entropy_kernel(floats(logits), targets.data<int64_t>(), lse.data<float>(), row_loss.data<double>(),
                               rows, v, w, -100, s.sink());
  });
  emulation::launch(1, 1, 1024, [&] {
    cuda::cross_entropy_mean_kernel(row_loss.data<double>(), targets.data<int64_t>(), rows, v, -100, mean.data<float>(),
                                    count.data<int64_t>());
  });
  Tensor want_lse = Tensor::empty({rows}), want_mean = Tensor::empty({});
  Tensor want_count = Tensor::empty({}, DType::i64);
  cpu.cross_entropy(logits, targets, want_lse, want_mean, want_count, -100, v);
  BOOST_TEST(ops::max_abs(ops::sub(lse, want_lse)) < 1e-5);
  BOOST_TEST(std::fabs(mean.item() - want_mean.item()) <= 1e-6 * std::fabs(want_mean.item()));

  const Tensor grad_loss = Tensor::scalar(3.0, DType::f32);
  Tensor grad = Tensor::full({rows, w}, 7.0, DType::bf16), want = Tensor::full({rows, w}, 9.0, DType::bf16);
  emulation::launch(unsigned(rows), 1, 64, [&] {
    cuda::classifier_grad_kernel(floats(logits), floats(grad), targets.data<int64_t>(), 0, v, w, v, -100,
                                 want_lse.data<float>(), grad_loss.data<float>(), count.data<int64_t>(), rows,
                                 s.sink());
  });
  cpu.cross_entropy_backward(logits, targets, want_lse, grad_loss, want_count, -100, v, want);
  const std::vector<float> g = ops::to(grad, DType::f32).to_vector<float>();
  const std::vector<float> e = ops::to(want, DType::f32).to_vector<float>();
  int64_t off = 0;
  for (size_t i = 0; i < g.size(); ++i) off += std::fabs(g[i] - e[i]) > 0x1p-8f * std::fabs(e[i]);
  BOOST_TEST(off == 0, off << " bf16 gradients more than one ulp from the CPU's");
  BOOST_TEST(s.record.found == 0);

  const Tensor table = ops::to(uniform({9, 5}, 7, -1, 1), DType::bf16);
  const std::vector<int64_t> idx = {3, 0, 8, 3};
  const Tensor indices = Tensor::from_vector(idx, {4});
  Tensor out = Tensor::zeros({4, 5}, DType::bf16);
  emulation::launch(1, 1, 64, [&] {
    cuda::embedding_kernel(floats(table), indices.raw_data(), true, floats(out), 4, 5, 9, 0, 9, s.sink());
  });
  BOOST_TEST(ops::max_abs(ops::sub(ops::to(out, DType::f32), ops::to(ops::embedding(table, indices), DType::f32))) ==
             0.0);
}

// Nothing counts: loss 0 and count 0, and the backward writes zeros (no division by 0).
BOOST_AUTO_TEST_CASE(cross_entropy_with_every_row_ignored) {
  const int64_t rows = 4, v = 9;
  const Tensor logits = uniform({rows, v}, 6, -1, 1);
  const Tensor targets = Tensor::from_vector(std::vector<int64_t>(rows, -100), {rows});
  Sink s;
  Tensor lse = Tensor::empty({rows}), row_loss = Tensor::empty({rows}, DType::f64);
  Tensor mean = Tensor::full({}, 5.0), count = Tensor::full({}, 5.0, DType::i64);
  emulation::launch(unsigned(rows), 1, 64, [&] {
    cuda::cross_entropy_kernel(floats(logits), targets.data<int64_t>(), lse.data<float>(), row_loss.data<double>(),
                               rows, v, v, -100, s.sink());
  });
  emulation::launch(1, 1, 1024, [&] {
    cuda::cross_entropy_mean_kernel(row_loss.data<double>(), targets.data<int64_t>(), rows, v, -100, mean.data<float>(),
                                    count.data<int64_t>());
  });
  BOOST_TEST(mean.item() == 0.0);
  BOOST_TEST(count.item() == 0.0);
  const Tensor grad_loss = Tensor::scalar(1.0, DType::f32);
  Tensor grad = Tensor::full({rows, v}, 7.0);
  emulation::launch(unsigned(rows), 1, 64, [&] {
    cuda::classifier_grad_kernel(floats(logits), floats(grad), targets.data<int64_t>(), 0, v, v, v, -100,
                                 lse.data<float>(), grad_loss.data<float>(), count.data<int64_t>(), rows,
                                 s.sink());
  });
  BOOST_TEST(ops::max_abs(grad) == 0.0);
  BOOST_TEST(s.record.found == 0);
}

// copy_at_ (Note [Positions on the device] in tensor/ops.h): a (B, NH, T, hs)-shaped key
// slice written into a cache at the position read from memory, as the CPU backend writes
// it, for positions 0, the middle and the last that fits, from a transposed (strided)
// source; a position past the last that fits, or negative, writes nothing and is recorded.
// increment_ adds to every counter.
BOOST_AUTO_TEST_CASE(copy_at_writes_at_the_position_in_memory) {
  const int64_t B = 2, NH = 3, cap = 9, T = 2, hs = 5;
  const Tensor src = ops::transpose(uniform({B, T, NH, hs}, 8, -1, 1), 1, 2);  // (B, NH, T, hs), strided
  for (const int64_t at : {int64_t(0), int64_t(4), cap - T, cap - T + 1, int64_t(-1)}) {
    const std::string what = "copy_at_ position " + std::to_string(at);
    const Tensor index = Tensor::from_vector(std::vector<int64_t>{at}, {1});
    Tensor got = Tensor::full({B, NH, cap, hs}, 3.0), want = Tensor::full({B, NH, cap, hs}, 3.0);
    const Tensor first = ops::narrow(got, 2, 0, T);
    const cuda::Strided<2> g = cuda::make_strided<2>(src.shape(), {&first.strides(), &src.strides()}, "copy_at");
    Sink s;
    emulation::launch(2, 1, 32, [&] {
      cuda::copy_at_kernel<uint32_t>(src.numel(), g, static_cast<uint32_t*>(got.raw_data()),
                                     static_cast<const uint32_t*>(src.raw_data()), index.data<int64_t>(),
                                     got.stride(2), cap - T, s.sink());
    });
    if (at >= 0 && at <= cap - T) {
      cpu_backend().copy_at(want, 2, index, src);
      BOOST_TEST(test_max_diff(got, want) == 0.0, what);
      BOOST_TEST(test_max_diff(ops::narrow(got, 2, at, T), src) == 0.0, what);
      BOOST_TEST(s.record.found == 0, what);
    } else {
      BOOST_TEST(test_max_diff(got, want) == 0.0, what << ": nothing written");
      check_record(s, cuda::IndexOp::copy_at, {{at, 0}}, 1, cap - T + 1, what);
      BOOST_CHECK_THROW(cpu_backend().copy_at(want, 2, index, src), Error);
    }
  }
  Tensor counters = Tensor::from_vector(std::vector<int64_t>{5, 0, -2, 7, 1000}, {5});
  emulation::launch(2, 1, 32, [&] { cuda::increment_kernel(counters.numel(), counters.data<int64_t>(), 3); });
  BOOST_TEST(counters.to_vector<int64_t>() == (std::vector<int64_t>{8, 3, 1, 10, 1003}), boost::test_tools::per_element());
}
