#include "cuda/backend/cuda_backend.h"
#include "cuda/backend/launch.cuh"
#include "cuda/backend/sample_kernels.cuh"
#include "tensor/device_runtime.h"
#include "tensor/ops.h"

namespace triad::cuda {

void CudaBackend::sample_tokens(const Tensor& logits, int64_t vocab, const TokenSampling& s, const Tensor& done,
                                const Tensor& tokens, const Tensor& logprobs, const Tensor& mask, const Tensor& step) {
  const int64_t B = logits.size(0);
  const int64_t k = s.top_k > 0 && s.top_k < vocab ? s.top_k : vocab;
  if (s.temperature != 0.0 && !untruncated(vocab, s.top_k, s.top_p) && k > kMaxDeviceTopK) {
    // More candidates than a block sorts: the rows go to the host and back.
    const Tensor host_logits = ops::to(ops::contiguous(ops::narrow(logits, 1, 0, vocab)), Device::cpu());
    const Tensor host_done = ops::to(done, Device::cpu()), host_step = step.defined() ? ops::to(step, Device::cpu()) : step;
    const Tensor host_tokens = Tensor::empty({B}, DType::i64), host_logprobs = Tensor::empty({B}),
                 host_mask = Tensor::empty({B});
    backend_for(Device::cpu()).sample_tokens(host_logits, vocab, s, host_done, host_tokens, host_logprobs, host_mask,
                                             host_step);
    copy_from_host(done, host_done);
    copy_from_host(tokens, host_tokens);
    copy_from_host(logprobs, host_logprobs);
    copy_from_host(mask, host_mask);
    return;
  }
  OnDevice on(logits);
  sample_kernel<<<unsigned(B), kSampleThreads, 0, on.stream()>>>(
      ptr<const float>(logits), logits.stride(0), vocab, s, step.defined() ? ptr<const int64_t>(step) : nullptr,
      ptr<float>(done), ptr<int64_t>(tokens), ptr<float>(logprobs), ptr<float>(mask));
  TRIAD_CUDA_CHECK_LAUNCH();
}

}  // namespace triad::cuda
