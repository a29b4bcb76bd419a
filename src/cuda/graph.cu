// CUDA graphs (graph.h). The capture's allocator pool is ended before the graph is
// instantiated and released when the graph is destroyed (or at once when the capture
// fails): Note [Graph pools] in caching_allocator.h.
#include <exception>
#include <string>

#include "cuda/check.h"
#include "cuda/device_allocator.h"
#include "cuda/graph.h"
#include "cuda/stream.h"

namespace triad::cuda {

namespace {

class CudaGraph final : public DeviceGraph {
 public:
  CudaGraph(int device, cudaStream_t stream, cudaGraph_t graph, cudaGraphExec_t exec, CachingAllocator::PoolId pool)
      : device_(device), stream_(stream), graph_(graph), exec_(exec), pool_(pool) {}
  ~CudaGraph() override {
    // A destructor cannot throw: the calls are checked, and a failure leaves the pool held.
    DeviceGuard guard(device_);
    const bool destroyed = cudaGraphExecDestroy(exec_) == cudaSuccess && cudaGraphDestroy(graph_) == cudaSuccess;
    if (destroyed) device_allocator(device_).cache().release_pool(pool_, reinterpret_cast<StreamId>(stream_));
  }
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  void replay() override {
    DeviceGuard guard(device_);
    TRIAD_CUDA_CHECK(cudaGraphLaunch(exec_, stream_));
  }

 private:
  int device_;
  cudaStream_t stream_;
  cudaGraph_t graph_;
  cudaGraphExec_t exec_;
  CachingAllocator::PoolId pool_;
};

}  // namespace

std::unique_ptr<DeviceGraph> record_graph(int device, const std::function<void()>& work) {
  DeviceGuard guard(device);
  const cudaStream_t stream = current_stream(device);
  const auto id = reinterpret_cast<StreamId>(stream);
  CachingAllocator& cache = device_allocator(device).cache();
  const CachingAllocator::PoolId pool = cache.begin_pool(id);
  std::string failure;
  cudaGraph_t graph = nullptr;
  const cudaError_t begun = cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
  if (begun != cudaSuccess) {
    failure = std::string("cudaStreamBeginCapture: ") + cudaGetErrorString(begun);
  } else {
    try {
      work();
    } catch (const std::exception& e) {
      failure = e.what();
    }
    const cudaError_t ended = cudaStreamEndCapture(stream, &graph);  // ends a failed capture too
    if (failure.empty() && ended != cudaSuccess)
      failure = std::string("cudaStreamEndCapture: ") + cudaGetErrorString(ended);
  }
  cache.end_pool(id);
  cudaGraphExec_t exec = nullptr;
  if (failure.empty()) {
    const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
    if (made != cudaSuccess) failure = std::string("cudaGraphInstantiate: ") + cudaGetErrorString(made);
  }
  if (!failure.empty()) {
    cudaGetLastError();  // a failed capture's error is not sticky: clear it
    if (graph) TRIAD_CUDA_CHECK(cudaGraphDestroy(graph));
    cache.release_pool(pool, id);
    TRIAD_CHECK(false, "cuda:" << device << ": the work could not be recorded as a CUDA graph: " << failure);
  }
  return std::make_unique<CudaGraph>(device, stream, graph, exec, pool);
}

}  // namespace triad::cuda
