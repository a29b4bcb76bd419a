// PipelineExecutor: runs one optimizer step of a pipeline schedule on one stage. The
// schedule is data (parallel/pipeline_schedule.h): this rank's list of forward, backward,
// input-gradient and weight-gradient actions; the executor performs them in order and
// moves activations and their gradients between neighbouring stages point to point.
//
// Note [Pipeline messages]: virtual stage c·p + r (chunk c of rank r) receives its input
// from virtual stage c·p + r − 1 and sends its output to c·p + r + 1; the gradient of that
// output comes back the other way. A send goes out with the stage's next receive as one
// send_recv where the peer mirrors it (Note [Paired pipeline messages]), posted at once and
// waited for when that receive is needed; other sends are posted alone without waiting,
// each one's buffer freed once it is delivered (checked after every action), and the step
// waits for the rest at its end; lone receives block when the action needs the data. Tags
// name the kind, the boundary crossed (the upper virtual stage of the two) and the
// micro-batch, so messages of different actions never match each other. Shapes are agreed
// once: the first activation a stage sends on each chunk is preceded by its shape and
// dtype; every later one (and every gradient, which has its activation's shape) is the
// bare payload.
//
// Each micro-batch's input to a stage is a leaf whose gradient is what the stage sends
// back; its activations live from its forward to its backward (ZB-H1: to its
// weight-gradient action, whose queue holds what W needs), and peak_live() reports the most micro-batches alive at once on this stage.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "autograd/weight_grad.h"
#include "nn/layer_list.h"
#include "parallel/communicator.h"
#include "parallel/pipeline_exchanges.h"
#include "parallel/pipeline_schedule.h"

namespace triad::parallel {

// When one action ran, in seconds from the start of the step, and how long of it was spent
// waiting for a message from another stage (benchmarks measure the bubble from these: a
// stage computes for end − start − waited).
struct ActionTiming {
  PipeAction action;
  double start, end, waited;
};

class PipelineExecutor {
 public:
  // pp: the pipeline group, ordered by stage (ProcessGrid::pp()). The stage holds
  // `chunks` chunks (virtual stages rank + c·pp->size()).
  PipelineExecutor(std::shared_ptr<nn::PipelineStage> stage, CommunicatorPtr pp, PipeSchedule schedule);

  struct Step {
    // inputs[m]: micro-batch m's input to the first layer (read on the first stage only);
    // targets[m]: its targets (read on the last stage only); on the stage's device.
    std::vector<Tensor> inputs, targets;
    // The loss of the last layer's output; empty: the layer list's own, fused with the last
    // layer where the list allows (PipelineStage::forward_loss, Note [Fused head loss]).
    std::function<Tensor(const Tensor& output, const Tensor& targets)> loss;
    // The gradient each micro-batch's loss is back-propagated with: a one-element tensor on
    // the losses' device (the loss scale over the micro-batches, made where the scale is);
    // undefined: 1.
    Tensor loss_gradient;
    // Runs before each backward (or input-gradient) action of chunk `chunk`, after its
    // gradient has arrived: `final` marks the chunk's last whole backward of the step, after
    // which its parameters' gradients are complete (ZeRO's begin_final_backward; never for
    // split passes, whose weight gradients come later).
    std::function<void(int chunk, bool final)> before_backward;
  };
  // Runs every action of the step; returns the micro-batches' losses on the stage holding
  // the last layer (empty elsewhere). Collective over pp.
  std::vector<Tensor> run(const Step& step);

  // The forwards alone, micro-batch after micro-batch (evaluation, under NoGradGuard):
  // the losses as run() returns them.
  std::vector<Tensor> forward_only(const Step& step);

  int stages() const { return pp_->size(); }
  int chunks() const { return stage_->chunks(); }
  int peak_live() const { return peak_live_; }
  const std::vector<ActionTiming>& timings() const { return timings_; }

 private:
  int virtual_stage(int chunk) const { return chunk * stages() + pp_->rank(); }
  bool first_virtual(int chunk) const { return virtual_stage(chunk) == 0; }
  bool last_virtual(int chunk) const { return virtual_stage(chunk) == chunks() * stages() - 1; }
  // The tag of a message across the boundary into virtual stage `boundary`.
  int tag(int kind, int micro, int boundary) const;
  int tag(const PipeMessage& m) const;
  void begin(const Step& step);
  std::vector<Tensor> finish();  // waits for the sends; the losses
  void forward(const Step& step, int m, int c);
  void backward_input(const Step& step, int m, int c, bool defer_weights, bool final);
  Device stage_device() const { return device_; }
  Tensor receive_activation(int m, int c);
  void send_activation(const Tensor& out, int m, int c);
  // The message: its prefetched pair's receive, or received now; the wait counts in waited_.
  Tensor receive(const PipeMessage& message);
  // Posts t, with the stage's next receive when the current action's exchange pairs it.
  void send(const Tensor& t, const PipeMessage& message);
  Tensor buffer_for(const PipeMessage& message);  // an empty tensor of the message's shape
  void wait_for_message(Work& work);              // counts the wait in waited_

  std::shared_ptr<nn::PipelineStage> stage_;
  CommunicatorPtr pp_;
  PipeSchedule schedule_;
  int micro_batches_ = 0;
  // Agreed shapes (Note [Pipeline messages]): of each chunk's input and output.
  struct Agreed {
    Shape shape;
    DType dtype = DType::f32;
    bool known = false;
  };
  std::vector<Agreed> input_shape_, output_shape_;
  // Per (micro-batch, chunk) while alive.
  struct Live {
    Tensor input, output;  // output: the loss on the last virtual stage
    std::unique_ptr<WeightGradQueue> weights;  // ZB-H1: the deferred weight gradients
  };
  std::vector<std::vector<Live>> live_;
  std::vector<WorkPtr> sends_;
  // This stage's actions and their exchanges for planned_micro_batches_ micro-batches.
  std::vector<PipeAction> actions_;
  std::vector<PipeExchange> exchanges_;
  int planned_micro_batches_ = 0;
  const PipeExchange* exchange_ = nullptr;  // the running action's (none in forward_only)
  struct Prefetch {                         // a send_recv posted for a later receive
    PipeMessage message;                    // what it receives
    Tensor recv, send;
    WorkPtr work;
  };
  std::optional<Prefetch> prefetch_;
  Tensor losses_stack_;  // (micro_batches): the losses, on the stage holding the last layer
  Device device_;        // the stage's, where activations are received
  int alive_ = 0, peak_live_ = 0;
  std::chrono::steady_clock::time_point t0_;
  double waited_ = 0;  // seconds blocked in receives during the current action
  std::vector<ActionTiming> timings_;
};

}  // namespace triad::parallel
