#include "rlhf/host_rows.h"

#include "autograd/meta.h"
#include "tensor/ops.h"

namespace triad::rlhf {

std::vector<double> host_values(const Tensor& t) {
  return ops::to(ops::to(detach(t), Device::cpu()), DType::f64).to_vector<double>();
}

std::vector<double> host_values(const std::vector<Tensor>& parts) {
  if (parts.empty()) return {};
  int64_t n = 0;
  for (const Tensor& p : parts) n += p.numel();
  const Tensor all = Tensor::empty({n}, DType::f64, parts.front().device());
  int64_t at = 0;
  for (const Tensor& p : parts) {
    TRIAD_ASSERT_MSG(p.device() == all.device(), "host_values: parts on " << all.device().str() << " and "
                                                                          << p.device().str());
    ops::copy_(ops::narrow(all, 0, at, p.numel()), ops::reshape(detach(p), {p.numel()}));
    at += p.numel();
  }
  return all.to_vector<double>();
}

std::vector<Tensor> host_copies(const std::vector<Tensor>& parts) {
  const std::vector<double> all = host_values(parts);
  std::vector<Tensor> out;
  auto at = all.begin();
  for (const Tensor& p : parts) {
    out.push_back(ops::to(Tensor::from_vector(std::vector<double>(at, at + p.numel()), p.shape()), p.dtype()));
    at += p.numel();
  }
  return out;
}

std::vector<double> host_mask(const Tensor& mask, const Shape& shape, const char* what) {
  TRIAD_CHECK(mask.defined() && mask.shape() == shape, what << ": the mask must have the shape " << shape_str(shape)
                                                            << ", got "
                                                            << (mask.defined() ? shape_str(mask.shape()) : "none"));
  std::vector<double> m = host_values(mask);
  for (size_t i = 0; i < m.size(); ++i)
    TRIAD_CHECK(m[i] == 0.0 || m[i] == 1.0,
                what << ": mask values must be 0 or 1, got " << m[i] << " at element " << i);
  return m;
}

Tensor tensor_like(const std::vector<double>& values, const Shape& shape, const Tensor& like) {
  return ops::to(ops::to(Tensor::from_vector(values, shape), like.dtype()), like.device());
}

}  // namespace triad::rlhf
