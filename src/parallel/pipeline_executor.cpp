#include "parallel/pipeline_executor.h"

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/meta.h"
#include "tensor/ops.h"

namespace triad::parallel {

namespace {

enum MessageKind { kActivation = 0, kGradient = 1, kShape = 2 };
constexpr int kMaxTag = 32767;  // the least MPI_TAG_UB the standard allows
constexpr int kShapeWords = 10;  // dtype, ndim, up to 8 dimensions

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

PipelineExecutor::PipelineExecutor(std::shared_ptr<nn::PipelineStage> stage, CommunicatorPtr pp, PipeSchedule schedule)
    : stage_(std::move(stage)), pp_(std::move(pp)), schedule_(schedule) {
  TRIAD_CHECK(stage_ && pp_, "PipelineExecutor: a stage and a pipeline group are needed");
  const std::vector<Tensor> params = stage_->parameters();
  device_ = params.empty() ? Device::cpu() : params.front().device();
  input_shape_.resize(size_t(chunks()));
  output_shape_.resize(size_t(chunks()));
}

int PipelineExecutor::tag(int kind, int micro, int boundary) const {
  const int64_t t = 1 + (int64_t(kind) * chunks() * stages() + boundary) * micro_batches_ + micro;
  TRIAD_CHECK(t <= kMaxTag, "pipeline: " << micro_batches_ << " micro-batches x " << chunks()
                                         << " chunks exceed the message tags MPI guarantees; use fewer micro-batches");
  return int(t);
}

int PipelineExecutor::tag(const PipeMessage& m) const {
  return tag(m.gradient ? kGradient : kActivation, m.micro, m.boundary);
}

Tensor PipelineExecutor::buffer_for(const PipeMessage& message) {
  const int c = message.receiving_chunk(stages());
  if (message.gradient) {
    const Tensor& out = live_[size_t(message.micro)][size_t(c)].output;
    return Tensor::empty(out.shape(), out.dtype(), out.device());
  }
  const Agreed& agreed = input_shape_[size_t(c)];
  TRIAD_ASSERT_MSG(agreed.known, "pipeline: " << to_string(message) << " before its shape");
  return Tensor::empty(agreed.shape, agreed.dtype, stage_device());
}

void PipelineExecutor::wait_for_message(parallel::Work& work) {
  const auto start = std::chrono::steady_clock::now();
  work.wait();
  waited_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

Tensor PipelineExecutor::receive(const PipeMessage& message) {
  if (!prefetch_) {
    Tensor t = buffer_for(message);
    wait_for_message(*pp_->recv(t, message.from(stages()), tag(message)));
    return t;
  }
  TRIAD_ASSERT_MSG(prefetch_->message == message, "pipeline: the " << to_string(message) << " received while the "
                                                                    << to_string(prefetch_->message)
                                                                    << " is posted with a send");
  wait_for_message(*prefetch_->work);
  Tensor t = prefetch_->recv;
  prefetch_.reset();
  return t;
}

void PipelineExecutor::send(const Tensor& t, const PipeMessage& message) {
  if (exchange_ && exchange_->send_with) {
    TRIAD_ASSERT_MSG(!prefetch_, "pipeline: two sends paired at once");
    const PipeMessage& in = *exchange_->send_with;
    Tensor buffer = buffer_for(in);
    WorkPtr work = pp_->send_recv(t, message.to(stages()), tag(message), buffer, in.from(stages()), tag(in));
    prefetch_ = Prefetch{in, buffer, t, std::move(work)};
  } else {
    sends_.push_back(pp_->send(t, message.to(stages()), tag(message)));
  }
}

Tensor PipelineExecutor::receive_activation(int m, int c) {
  Agreed& agreed = input_shape_[size_t(c)];
  if (!agreed.known) {
    const Tensor header = Tensor::empty({kShapeWords}, DType::i64);
    wait_for_message(*pp_->recv(header, (pp_->rank() + stages() - 1) % stages(), tag(kShape, 0, virtual_stage(c))));
    const std::vector<int64_t> h = header.to_vector<int64_t>();
    agreed.dtype = DType(h[0]);
    agreed.shape.assign(h.begin() + 2, h.begin() + 2 + h[1]);
    agreed.known = true;
  }
  return receive(PipeMessage{false, virtual_stage(c), m});
}

void PipelineExecutor::send_activation(const Tensor& out, int m, int c) {
  const int dst = (pp_->rank() + 1) % stages();
  Agreed& agreed = output_shape_[size_t(c)];
  if (!agreed.known) {
    TRIAD_CHECK(out.dim() <= kShapeWords - 2, "pipeline: a stage's output has " << out.dim() << " dimensions (at most "
                                                                              << kShapeWords - 2 << ")");
    std::vector<int64_t> h(kShapeWords, 0);
    h[0] = int64_t(out.dtype()), h[1] = out.dim();
    for (int64_t d = 0; d < out.dim(); ++d) h[size_t(2 + d)] = out.size(d);
    agreed = {out.shape(), out.dtype(), true};
    sends_.push_back(pp_->send(Tensor::from_vector(h, {kShapeWords}), dst, tag(kShape, 0, virtual_stage(c) + 1)));
  }
  TRIAD_CHECK(out.shape() == agreed.shape && out.dtype() == agreed.dtype,
              "pipeline: stage " << pp_->rank() << " chunk " << c << " output " << out.str()
                                 << " differs from the first micro-batch's " << shape_str(agreed.shape)
                                 << "; every micro-batch must have the same shape");
  send(ops::contiguous(detach(out)), PipeMessage{false, virtual_stage(c) + 1, m});
}

void PipelineExecutor::forward(const Step& step, int m, int c) {
  Live& l = live_[size_t(m)][size_t(c)];
  TRIAD_ASSERT_MSG(!l.input.defined() && !l.output.defined(), "forward of micro-batch " << m << " ran twice");
  if (first_virtual(c)) {
    l.input = step.inputs[size_t(m)];
  } else {
    l.input = receive_activation(m, c);
    if (GradMode::enabled()) set_requires_grad(l.input);
  }
  Tensor out;
  if (!last_virtual(c))
    out = stage_->forward_chunk(c, l.input);
  else if (step.loss)
    out = step.loss(stage_->forward_chunk(c, l.input), step.targets[size_t(m)]);
  else
    out = stage_->forward_loss(c, l.input, step.targets[size_t(m)]);
  if (last_virtual(c)) {
    if (!losses_stack_.defined()) losses_stack_ = Tensor::empty({micro_batches_}, out.dtype(), out.device());
    ops::copy_(ops::select(losses_stack_, 0, m), detach(out));
  }
  l.output = out;  // before the send: a receive paired with it takes its gradient's shape from it
  if (!last_virtual(c)) send_activation(out, m, c);
  peak_live_ = std::max(peak_live_, ++alive_);
}

void PipelineExecutor::backward_input(const Step& step, int m, int c, bool defer_weights, bool final) {
  Live& l = live_[size_t(m)][size_t(c)];
  TRIAD_ASSERT_MSG(l.output.defined(), "backward of micro-batch " << m << " before its forward");
  Tensor seed;
  if (last_virtual(c)) {
    seed = step.loss_gradient.defined() ? ops::reshape(ops::to(step.loss_gradient, l.output.dtype()), l.output.shape())
                                        : Tensor::full(l.output.shape(), 1.0, l.output.dtype(), l.output.device());
  } else {
    seed = receive(PipeMessage{true, virtual_stage(c) + 1, m});
  }
  if (step.before_backward) step.before_backward(c, final);
  if (defer_weights) {
    l.weights = std::make_unique<WeightGradQueue>();
    DeferWeightGrads defer(*l.weights);
    triad::backward(l.output, seed);
  } else {
    triad::backward(l.output, seed);
  }
  if (!first_virtual(c)) {
    Tensor g = grad(l.input);
    if (!g.defined()) g = Tensor::zeros(l.input.shape(), l.input.dtype(), l.input.device());
    send(ops::contiguous(g), PipeMessage{true, virtual_stage(c), m});
  }
  l.input = l.output = Tensor();
  if (!defer_weights) --alive_;  // else its weight-gradient pass still holds activations
}

void PipelineExecutor::begin(const Step& step) {
  micro_batches_ = int(std::max(step.inputs.size(), step.targets.size()));
  TRIAD_CHECK(micro_batches_ > 0, "pipeline: no micro-batches");
  live_ = std::vector<std::vector<Live>>(size_t(micro_batches_));
  for (auto& row : live_) row.resize(size_t(chunks()));
  alive_ = peak_live_ = 0;
  exchange_ = nullptr;
  prefetch_.reset();
  timings_.clear();
  losses_stack_ = Tensor();
}

std::vector<Tensor> PipelineExecutor::finish() {
  TRIAD_ASSERT_MSG(!prefetch_, "pipeline: a paired receive still posted at the step's end");
  exchange_ = nullptr;
  for (WorkPtr& w : sends_) w->wait();
  sends_.clear();
  std::vector<Tensor> losses;
  if (last_virtual(chunks() - 1))
    for (int m = 0; m < micro_batches_; ++m) losses.push_back(ops::select(losses_stack_, 0, m));
  live_.clear();
  return losses;
}

std::vector<Tensor> PipelineExecutor::forward_only(const Step& step) {
  begin(step);
  for (int m = 0; m < micro_batches_; ++m)
    for (int c = 0; c < chunks(); ++c) {
      forward(step, m, c);
      live_[size_t(m)][size_t(c)] = Live{};
      --alive_;
    }
  return finish();
}

std::vector<Tensor> PipelineExecutor::run(const Step& step) {
  begin(step);
  if (planned_micro_batches_ != micro_batches_) {  // the plan depends on m only: made once per m
    std::vector<std::vector<PipeAction>> lists;     // every stage's: a pair needs its peer's mirror
    for (int r = 0; r < stages(); ++r) lists.push_back(pipe_actions(schedule_, stages(), r, micro_batches_, chunks()));
    exchanges_ = pipe_exchanges(lists, chunks())[size_t(pp_->rank())];
    actions_ = std::move(lists[size_t(pp_->rank())]);
    planned_micro_batches_ = micro_batches_;
  }
  const std::vector<PipeAction>& actions = actions_;
  const std::vector<PipeExchange>& exchanges = exchanges_;
  // Each chunk's last whole backward (its gradients are complete after it).
  std::vector<size_t> final_backward(size_t(chunks()), actions.size());
  for (size_t i = 0; i < actions.size(); ++i)
    if (actions[i].op == PipeOp::backward) final_backward[size_t(actions[i].chunk)] = i;
  t0_ = std::chrono::steady_clock::now();
  for (size_t i = 0; i < actions.size(); ++i) {
    const PipeAction& a = actions[i];
    const double start = seconds_since(t0_);
    waited_ = 0;
    exchange_ = &exchanges[i];
    switch (a.op) {
      case PipeOp::forward:
        forward(step, a.micro, a.chunk);
        break;
      case PipeOp::backward:
        backward_input(step, a.micro, a.chunk, /*defer_weights=*/false, i == final_backward[size_t(a.chunk)]);
        break;
      case PipeOp::backward_input:
        backward_input(step, a.micro, a.chunk, /*defer_weights=*/true, /*final=*/false);
        break;
      case PipeOp::backward_weight: {
        Live& l = live_[size_t(a.micro)][size_t(a.chunk)];
        TRIAD_ASSERT_MSG(l.weights, "weight gradient of micro-batch " << a.micro << " before its input gradient");
        l.weights->run();
        l.weights.reset();
        --alive_;
        break;
      }
    }
    timings_.push_back({a, start, seconds_since(t0_), waited_});
    // Delivered messages free their buffers now, not at the end of the step: a stage would
    // otherwise hold a copy of every activation and gradient it sent.
    std::erase_if(sends_, [](const WorkPtr& w) { return w->test(); });
  }
  return finish();
}

}  // namespace triad::parallel
