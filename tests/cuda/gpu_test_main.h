// main() of the GPU test programs (tests/cuda/test_*_cuda.cpp, test_*_cuda_mpi.cpp). A test
// that cannot run for want of GPUs must not pass: it prints why and exits 77, which CTest
// (SKIP_RETURN_CODE, tests/CMakeLists.txt) reports as skipped.
//
// Use: #define BOOST_TEST_MODULE name and BOOST_TEST_NO_MAIN before any include, then
// TRIAD_GPU_TEST_MAIN() (one process, one GPU), TRIAD_GPU_MPI_TEST_MAIN() (under mpirun,
// a GPU per rank) or TRIAD_SHARED_GPU_MPI_TEST_MAIN() (under mpirun, ranks may share a
// GPU: one is enough). Under mpirun MPI is started and finalized here, so such a test
// needs no MpiFixture.
#pragma once

#ifndef BOOST_TEST_NO_MAIN
#error "define BOOST_TEST_NO_MAIN before any include: main() comes from TRIAD_GPU_TEST_MAIN"
#endif
#include <boost/test/unit_test.hpp>
#include <cstdio>

#include "cuda/runtime.h"
#include "parallel/runtime.h"
#include "tensor/tensor.h"

namespace triad::test {

inline constexpr int kSkipped = 77;

inline int gpu_test_main(int argc, char** argv, bool (*init)()) {
  if (cuda::device_count() == 0) {
    std::printf("no CUDA device: skipped\n");
    return kSkipped;
  }
  return boost::unit_test::unit_test_main(init, argc, argv);
}

// Every rank needs a GPU of its own on its node (or, `shared`, any GPU); the ranks agree
// before skipping.
inline int gpu_mpi_test_main(int argc, char** argv, bool (*init)(), bool shared = false) {
  parallel::CommunicatorPtr world = parallel::init(argc, argv);
  const int needed = shared ? 1 : parallel::ranks_on_node();
  Tensor missing = Tensor::full({1}, cuda::device_count() < needed ? 1.0 : 0.0, DType::i32);
  world->all_reduce(missing)->wait();
  int rc = kSkipped;
  if (missing.item() == 0.0)
    rc = boost::unit_test::unit_test_main(init, argc, argv);
  else if (world->rank() == 0)
    std::printf("no CUDA device for %s (%d rank(s) on this node, %d device(s)): skipped\n",
                shared ? "the ranks to share" : "every rank", parallel::ranks_on_node(), cuda::device_count());
  parallel::finalize();
  return rc;
}

}  // namespace triad::test

#define TRIAD_GPU_TEST_MAIN() \
  int main(int argc, char** argv) { return ::triad::test::gpu_test_main(argc, argv, &init_unit_test); }
#define TRIAD_GPU_MPI_TEST_MAIN() \
  int main(int argc, char** argv) { return ::triad::test::gpu_mpi_test_main(argc, argv, &init_unit_test); }
#define TRIAD_SHARED_GPU_MPI_TEST_MAIN() \
  int main(int argc, char** argv) { return ::triad::test::gpu_mpi_test_main(argc, argv, &init_unit_test, true); }
