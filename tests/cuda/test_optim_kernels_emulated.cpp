// The CUDA backend's multi-tensor optimizer kernels (cuda/backend/multi_tensor_kernels.cuh)
// run on the CPU under an emulation of CUDA (cuda/cuda_emulation.h): the tables cover every
// element of every tensor once, a tensor cut across tables included; three AdamW and SGD
// steps over groups of many tensors of odd sizes match the CPU optimizers (optim::AdamW,
// optim::SGD) in both adam_w_mode values, with and without bias correction, weight decay,
// momentum, dampening and nesterov, and write the bf16/f16 copy of mixed precision. The
// kernel against the same element arithmetic run here is compared bit for bit; against the
// library's CPU optimizer (built -march=native, where the compiler may fuse a multiply and
// an add into one FMA that this program's build does not) within a few f32 ulps. Clipping
// to a norm read on the device matches optim::clip_grads bit for bit, and so does scaling
// by a factor read there (the loss scale's unscaling) the CPU's; constants that say skip
// change nothing.
#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>

#include "cuda/cuda_emulation.h"
// The emulation comes first: the kernels' header takes the builtins from it.
#include "cuda/backend/multi_tensor_kernels.cuh"
#include "support/check.h"
#include "triad.h"

using namespace triad;

namespace {

constexpr int64_t kOptimChunk = 16;  // small chunks: hundreds of blocks from small tensors

// 50 tensors of odd sizes: more tensors than a table holds, and more chunks of
// kOptimChunk elements (944) than a table's 320 blocks, so that tensors continue in the
// next table.
std::vector<int64_t> optim_sizes() {
  std::vector<int64_t> sizes;
  for (int i = 0; i < 50; ++i) sizes.push_back(i % 5 == 0 ? 1 + i : 97 * (i % 7) + 3 * i + 1);
  return sizes;
}

Tensor optim_uniform(int64_t n, uint64_t seed, double lo, double hi) {
  Tensor t = Tensor::empty({n});
  Generator g(seed);
  ops::uniform_(t, lo, hi, g);
  return t;
}

// Runs every table of `entries` under the emulation, 32 threads a block (each then takes
// a chunk's elements in two rounds, as the GPU's 512 take theirs in 128).
template <class Entry>
void optim_run(const std::vector<Entry>& entries) {
  cuda::for_each_table(
      entries,
      [](const cuda::TensorTable<Entry>& table, int blocks) {
        emulation::launch(unsigned(blocks), 1, 32, [&] { cuda::multi_tensor_kernel(table); });
      },
      kOptimChunk);
}

// Within 8 f32 ulps of the tensor's largest magnitude: the FMAs one compiler forms and the
// other does not, over three steps (an update that nearly cancels a value leaves an error
// of its operands' size, not the result's).
void optim_close(const Tensor& got, const Tensor& want, const std::string& what) {
  const double scale = ops::max_abs(want), diff = test::max_abs_diff(got, want);
  BOOST_TEST(diff <= 8 * std::numeric_limits<float>::epsilon() * scale,
             what << ": differs by " << diff / (std::numeric_limits<float>::epsilon() * scale) << " ulps of " << scale);
}

void optim_same(const Tensor& got, const Tensor& want, const std::string& what) {
  BOOST_TEST(test::max_abs_diff(got, want) == 0.0, what);
}

}  // namespace

// Every element of every tensor is taken by exactly one block, tables within their limits,
// and tensors whose chunks do not fit continue in the next table.
BOOST_AUTO_TEST_CASE(tables_cover_every_element_once) {
  struct Probe {
    int64_t n;
    int id;
  };
  std::vector<Probe> probes;
  const std::vector<int64_t> sizes = optim_sizes();
  int64_t chunks = 0;
  for (size_t i = 0; i < sizes.size(); ++i)
    probes.push_back({sizes[i], int(i)}), chunks += (sizes[i] + kOptimChunk - 1) / kOptimChunk;
  std::vector<std::vector<int>> hits(sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) hits[i].assign(size_t(sizes[i]), 0);
  int tables = 0;
  int64_t blocks_seen = 0;
  std::vector<int> tables_of(sizes.size(), 0);  // tables holding some chunk of tensor i
  cuda::for_each_table(
      probes,
      [&](const cuda::TensorTable<Probe>& t, int blocks) {
        ++tables;
        blocks_seen += blocks;
        BOOST_TEST((blocks > 0 && blocks <= cuda::kTableBlocks));
        std::set<int> used;
        for (int b = 0; b < blocks; ++b) {
          BOOST_TEST_REQUIRE(int(t.tensor_of[b]) < cuda::kTableTensors);
          used.insert(t.tensor_of[b]);
          const Probe& p = t.entry[t.tensor_of[b]];
          for (int64_t i = t.chunk_of[b] * t.chunk; i < std::min(p.n, (t.chunk_of[b] + 1) * t.chunk); ++i)
            ++hits[size_t(p.id)][size_t(i)];
        }
        BOOST_TEST(int(used.size()) <= cuda::kTableTensors);
        for (int e : used) ++tables_of[size_t(t.entry[e].id)];
      },
      kOptimChunk);
  BOOST_TEST(blocks_seen == chunks);
  BOOST_TEST(tables == 3);  // 944 chunks need three
  BOOST_TEST(std::count(tables_of.begin(), tables_of.end(), 2) >= 1);  // a tensor cut across two tables
  for (size_t i = 0; i < hits.size(); ++i)
    for (int h : hits[i]) BOOST_TEST_REQUIRE(h == 1, "tensor " << i);
}

// Three AdamW steps over two groups (decayed and not) of many tensors: the kernel against
// optim::AdamW, and bit for bit against adamw_element run here; the 16-bit copy is the
// updated parameter rounded once.
BOOST_AUTO_TEST_CASE(adamw_matches_the_cpu_optimizer) {
  const std::vector<int64_t> sizes = optim_sizes();
  for (bool adam_w_mode : {true, false})
    for (bool bias_correction : {true, false})
      for (DType copy_dtype : {DType::bf16, DType::f16}) {
        const std::string what = std::string(adam_w_mode ? "adamw" : "adam L2") +
                                 (bias_correction ? "" : " no bias correction") + " " + dtype_name(copy_dtype);
        const optim::AdamWOptions o{.lr = 1e-2,
                                    .beta1 = 0.9,
                                    .beta2 = 0.95,
                                    .eps = 1e-8,
                                    .adam_w_mode = adam_w_mode,
                                    .bias_correction = bias_correction};
        std::vector<Tensor> ref, p, m, v, here_p, here_m, here_v, copy;
        std::vector<optim::ParamGroup> groups{{{}, 0.1}, {{}, 0.0}};
        for (size_t i = 0; i < sizes.size(); ++i) {
          ref.push_back(optim_uniform(sizes[i], 10 + i, -1, 1));
          set_requires_grad(ref.back(), true);
          groups[i % 2].params.push_back(ref.back());
          p.push_back(ops::clone(ref.back())), here_p.push_back(ops::clone(ref.back()));
          m.push_back(Tensor::zeros({sizes[i]})), v.push_back(Tensor::zeros({sizes[i]}));
          here_m.push_back(Tensor::zeros({sizes[i]})), here_v.push_back(Tensor::zeros({sizes[i]}));
          copy.push_back(Tensor::empty({sizes[i]}, copy_dtype));
        }
        optim::AdamW cpu(groups, o);
        // Group order as optim::AdamW visits the parameters.
        std::vector<size_t> order;
        for (size_t gi = 0; gi < 2; ++gi)
          for (size_t i = gi; i < sizes.size(); i += 2) order.push_back(i);
        for (int64_t t = 1; t <= 3; ++t) {
          std::vector<cuda::AdamWEntry> entries;
          for (size_t i : order) {
            const Tensor g = optim_uniform(sizes[i], 1000 * uint64_t(t) + i, -1, 1);
            set_grad(ref[i], g);
            const AdamWStep s = optim::adamw_step(o, o.lr, groups[i % 2].weight_decay, t);
            entries.push_back({p[i].data<float>(), g.data<float>(), m[i].data<float>(), v[i].data<float>(),
                               cuda::Floats{copy[i].raw_data(), copy_dtype}, sizes[i],
                               AdamWConstants<float>::of(s)});
            const AdamWConstants<float> k = AdamWConstants<float>::of(s);
            float *hp = here_p[i].data<float>(), *hm = here_m[i].data<float>(), *hv = here_v[i].data<float>();
            for (int64_t e = 0; e < sizes[i]; ++e) adamw_element(hp[e], hm[e], hv[e], g.data<float>()[e], k);
          }
          optim_run(entries);
          cpu.step();
        }
        for (size_t i = 0; i < sizes.size(); ++i) {
          const std::string at = what + " tensor " + std::to_string(i);
          optim_same(p[i], here_p[i], at + " param, kernel and element");
          optim_same(m[i], here_m[i], at + " exp_avg, kernel and element");
          optim_same(v[i], here_v[i], at + " exp_avg_sq, kernel and element");
          optim_close(p[i], ref[i], at + " param against optim::AdamW");
          optim_close(m[i], cpu.exp_avg(i % 2 == 0 ? i / 2 : 25 + i / 2), at + " exp_avg against optim::AdamW");
          optim_same(copy[i], ops::to(p[i], copy_dtype), at + " 16-bit copy");
        }
      }
}

// Note [Adam's constants in memory]: entries whose constants are read from memory (written
// by ops::adamw_constants, one row per weight decay; the launch's own constants NaN) update
// bit for bit as entries given the constants, over three steps of changing rates.
BOOST_AUTO_TEST_CASE(adamw_reads_its_constants_from_memory) {
  const std::vector<int64_t> sizes = optim_sizes();
  const optim::AdamWOptions o{.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8};
  const double decays[] = {0.1, 0.0};
  std::vector<Tensor> p, m, v, live_p, live_m, live_v;
  for (size_t i = 0; i < sizes.size(); ++i) {
    p.push_back(optim_uniform(sizes[i], 30 + i, -1, 1)), live_p.push_back(ops::clone(p.back()));
    m.push_back(Tensor::zeros({sizes[i]})), live_m.push_back(Tensor::zeros({sizes[i]}));
    v.push_back(Tensor::zeros({sizes[i]})), live_v.push_back(Tensor::zeros({sizes[i]}));
  }
  const Tensor table = Tensor::empty({2, kAdamWConstants});
  AdamWConstants<float> unread;
  std::memset(&unread, 0xff, sizeof unread);  // NaNs: an entry reading these would show it
  // Step t at rate lr: entries given the host's constants, and entries reading the table;
  // with row 0 skipped, its tensors get no given entry (they must keep their values).
  const auto run_step = [&](int64_t t, double lr, uint64_t seed, bool skip_row0) {
    std::vector<Tensor> grads;  // alive until the kernels ran
    std::vector<cuda::AdamWEntry> given, read;
    for (size_t i = 0; i < sizes.size(); ++i) {
      const Tensor& g = grads.emplace_back(optim_uniform(sizes[i], seed + i, -1, 1));
      if (!skip_row0 || i % 2 == 1)
        given.push_back({p[i].data<float>(), g.data<float>(), m[i].data<float>(), v[i].data<float>(), cuda::Floats{},
                         sizes[i], AdamWConstants<float>::of(optim::adamw_step(o, lr, decays[i % 2], t)), nullptr});
      read.push_back({live_p[i].data<float>(), g.data<float>(), live_m[i].data<float>(), live_v[i].data<float>(),
                      cuda::Floats{}, sizes[i], unread,
                      reinterpret_cast<const AdamWConstants<float>*>(table.data<float>() + (i % 2) * kAdamWConstants)});
    }
    optim_run(given);
    optim_run(read);
  };
  const auto check = [&](const std::string& what) {
    for (size_t i = 0; i < sizes.size(); ++i) {
      const std::string at = what + "tensor " + std::to_string(i);
      optim_same(live_p[i], p[i], at + " param");
      optim_same(live_m[i], m[i], at + " exp_avg");
      optim_same(live_v[i], v[i], at + " exp_avg_sq");
    }
  };
  for (int64_t t = 1; t <= 3; ++t) {
    const double lr = o.lr / double(t);  // a schedule's rate
    for (size_t d = 0; d < 2; ++d)
      ops::adamw_constants(optim::adamw_step(o, lr, decays[d], t), ops::select(table, 0, int64_t(d)));
    run_step(t, lr, 3000 * uint64_t(t), false);
  }
  check("");
  // Row 0 says skip (an overflowed fp16 step, kAdamWSkip): its tensors keep their values,
  // row 1's are updated as the host's constants update them.
  table.data<float>()[kAdamWSkip] = 1.0f;
  run_step(3, o.lr / 3.0, 9000, true);
  check("skipped or not, ");
}

// Three SGD steps (the momentum buffer's first step among them) over two groups: the kernel
// against optim::SGD, and bit for bit against sgd_element run here.
BOOST_AUTO_TEST_CASE(sgd_matches_the_cpu_optimizer) {
  const std::vector<int64_t> sizes = optim_sizes();
  for (const optim::SGDOptions& o :
       {optim::SGDOptions{.lr = 0.1}, optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .dampening = 0.25},
        optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .nesterov = true}}) {
    const std::string what = "sgd momentum " + std::to_string(o.momentum) + (o.nesterov ? " nesterov" : "");
    std::vector<Tensor> ref, p, buf, here_p, here_buf;
    std::vector<optim::ParamGroup> groups{{{}, 0.05}, {{}, 0.0}};
    for (size_t i = 0; i < sizes.size(); ++i) {
      ref.push_back(optim_uniform(sizes[i], 20 + i, -1, 1));
      set_requires_grad(ref.back(), true);
      groups[i % 2].params.push_back(ref.back());
      p.push_back(ops::clone(ref.back())), here_p.push_back(ops::clone(ref.back()));
      buf.push_back(Tensor::full({sizes[i]}, NAN)), here_buf.push_back(Tensor::full({sizes[i]}, NAN));  // unread at first
    }
    optim::SGD cpu(groups, o);
    const bool momentum = o.momentum != 0;
    for (int64_t t = 1; t <= 3; ++t) {
      std::vector<cuda::SGDEntry> entries;
      for (size_t i = 0; i < sizes.size(); ++i) {
        const Tensor g = optim_uniform(sizes[i], 2000 * uint64_t(t) + i, -1, 1);
        set_grad(ref[i], g);
        const SGDStep s{o.lr, o.momentum, o.dampening, groups[i % 2].weight_decay, o.nesterov};
        const SGDConstants<float> k = SGDConstants<float>::of(s, t == 1);
        entries.push_back({p[i].data<float>(), g.data<float>(), momentum ? buf[i].data<float>() : nullptr, sizes[i], k});
        float *hp = here_p[i].data<float>(), *hb = here_buf[i].data<float>();
        for (int64_t e = 0; e < sizes[i]; ++e) sgd_element(hp[e], momentum ? hb + e : nullptr, g.data<float>()[e], k);
      }
      optim_run(entries);
      cpu.step();
    }
    for (size_t i = 0; i < sizes.size(); ++i) {
      const std::string at = what + " tensor " + std::to_string(i);
      optim_same(p[i], here_p[i], at + " param, kernel and element");
      if (momentum) optim_same(buf[i], here_buf[i], at + " buffer, kernel and element");
      optim_close(p[i], ref[i], at + " param against optim::SGD");
    }
  }
}

// Clipping to a norm read on the device: the kernel multiplies as optim::clip_grads does,
// bit for bit, for a norm above max_norm (clipped), below it (unchanged) and not finite
// (NaN: unchanged; inf: zeroed).
BOOST_AUTO_TEST_CASE(clip_matches_the_cpu_clipping) {
  const std::vector<int64_t> sizes = optim_sizes();
  for (double norm : {3.7, 0.4, double(NAN), double(INFINITY)}) {
    const double max_norm = 1.0;
    std::vector<Tensor> grads, want;
    std::vector<cuda::ClipEntry> entries;
    const Tensor squared = Tensor::full({1}, norm * norm, DType::f64);
    for (size_t i = 0; i < sizes.size(); ++i) {
      grads.push_back(optim_uniform(sizes[i], 30 + i, -1, 1));
      want.push_back(ops::clone(grads.back()));
      entries.push_back({grads.back().data<float>(), sizes[i], squared.data<double>(), max_norm});
    }
    optim_run(entries);
    optim::clip_grads(want, std::sqrt(norm * norm), max_norm);
    for (size_t i = 0; i < sizes.size(); ++i)
      BOOST_TEST(test::max_abs_diff(grads[i], want[i]) == 0.0, "norm " << norm << " tensor " << i);
    if (norm == 3.7)  // clipped: the factor 1 / 3.7 reached every tensor
      BOOST_TEST(ops::max_abs(grads.back()) < 0.3);
  }
}

// The loss scale's unscaling read on the device (ops::mul_by_): the factor rounded to f32
// as mul_ rounds it, every element of every tensor once, as the CPU's.
BOOST_AUTO_TEST_CASE(scale_by_a_factor_in_memory_matches_the_cpu) {
  const std::vector<int64_t> sizes = optim_sizes();
  const Tensor factor = Tensor::full({1}, 1.0 / (3.0 * 65536.0), DType::f64);
  std::vector<Tensor> tensors, want;
  std::vector<cuda::ScaleEntry> entries;
  for (size_t i = 0; i < sizes.size(); ++i) {
    tensors.push_back(optim_uniform(sizes[i], 60 + i, -1e4, 1e4));
    want.push_back(ops::clone(tensors.back()));
    entries.push_back({tensors.back().data<float>(), sizes[i], factor.data<double>()});
  }
  optim_run(entries);
  ops::mul_by_(want, factor);
  for (size_t i = 0; i < sizes.size(); ++i) BOOST_TEST(test::max_abs_diff(tensors[i], want[i]) == 0.0, "tensor " << i);
  // The CPU's mul_by_ is mul_ by the factor.
  const Tensor t = optim_uniform(100, 70, -1, 1), u = ops::clone(t);
  ops::mul_by_({t}, factor);
  ops::mul_(u, 1.0 / (3.0 * 65536.0));
  BOOST_TEST(test::max_abs_diff(t, u) == 0.0);
}
