#include "estimate/layout_memory.h"

#include <algorithm>
#include <cstdio>
#include <set>

#include "estimate/pipeline_time.h"
#include "nn/gpt_layers.h"
#include "nn/pipeline_partition.h"
#include "tensor/error.h"

namespace triad::estimate {

namespace {

constexpr double kGB = 1e9;

// The layers a parameter of GPTConfig::parameter_sizes belongs to (the token table: the
// embedding's and the head's).
std::vector<int> layers_of(const std::string& name, int64_t n_layer) {
  const int head = int(n_layer) + 1;
  if (name.starts_with("wte.")) return {0, head};
  if (name.starts_with("wpe.")) return {0};
  if (name.starts_with("ln_f.")) return {head};
  if (name.starts_with("blocks.")) return {1 + std::stoi(name.substr(7))};
  throw Error("[estimate] parameter '" + name + "' belongs to no layer of the GPT's layer list");
}

// What one micro-batch of virtual stage `vs` (layers [first, last)) keeps, and the largest
// run it recomputes (Note in layout_memory.h).
struct ChunkEstimate {
  ChunkBytes bytes;
  double recompute = 0;
};

ChunkEstimate chunk_estimate(const std::vector<nn::LayerSpec>& layers, const ActivationShape& s, int first, int last,
                             bool first_vs, bool last_vs, bool pipelined, int interval, bool per_block) {
  const double resid = residual_bytes(s);
  const auto of = [&](int i) { return gpt_layer_activations(s, layers[size_t(i)].type); };
  ChunkEstimate e;
  if (last_vs) e.bytes.saved += fused_loss_activations(s).saved;
  if (!last_vs) e.bytes.saved += resid;  // the output, held for the backward
  int i = first;
  if (first_vs) {  // the embedding: its input (token ids) needs no gradient, so it is never recomputed
    const LayerActivations a = of(i++);
    e.bytes.saved += a.saved, e.bytes.deferred += a.deferred;
  }
  const int run = pipelined ? interval : (per_block ? 1 : 0);
  // The head runs with its fused loss after the runs, never recomputed (Note [Fused head
  // loss] in nn/layer_list.h).
  const int runs_end = last_vs ? last - 1 : last;
  while (i < runs_end) {
    const bool recomputed = run > 0 && (pipelined || layers[size_t(i)].type == "Block");
    const int end = recomputed ? std::min(runs_end, i + run) : i + 1;
    double full = 0;
    for (int j = i; j < end; ++j) {
      const LayerActivations a = of(j);
      full += a.saved, e.bytes.deferred += a.deferred;
    }
    if (recomputed) {
      e.bytes.saved += resid;  // the run's input; its first layer's bytes count it again
      e.recompute = std::max(e.recompute, full - resid);
    } else {
      e.bytes.saved += full;
    }
    i = end;
  }
  if (last_vs) {
    const LayerActivations head = of(last - 1);
    e.bytes.saved += head.saved, e.bytes.deferred += head.deferred;
  }
  return e;
}

std::string ranges_text(const std::vector<nn::LayerRange>& chunks) {
  std::string s;
  for (const nn::LayerRange& r : chunks) {
    if (!s.empty()) s += ",";
    s += std::to_string(r.first) + (r.last - r.first > 1 ? "-" + std::to_string(r.last - 1) : "");
  }
  return s;
}

}  // namespace

LayoutMemory estimate_layout_memory(const engine::TrainConfig& config, const LayoutRequest& layout, int64_t seq,
                                    double k, int64_t threshold) {
  const nn::GPTConfig& model = config.model;
  LayoutMemory out;
  out.layout = layout, out.k = k, out.threshold = threshold;
  out.seq = seq > 0 ? seq : model.seq_len;
  TRIAD_CHECK(out.seq <= model.seq_len, "--seq " << out.seq << " exceeds the model's seq_len " << model.seq_len);
  const int p = layout.pp, v = layout.virtual_stages, m = layout.micro_batches;
  const bool pipelined = p > 1;
  out.partition = config.pipeline.partition;
  out.schedule = parallel::parse_pipe_schedule(layout.schedule);
  const int interval = config.pipeline.activation_checkpoint_interval;
  const bool per_block = !pipelined && model.activation_checkpointing;
  out.checkpointing = pipelined ? (interval > 0 ? "runs of " + std::to_string(interval) + " layers" : "off")
                                : (per_block ? "every block" : "off");
  if (pipelined && model.activation_checkpointing)
    out.notes.push_back(
        "model.activation_checkpointing recomputes blocks of nn::GPT only (pp 1); pipeline stages "
        "recompute with pipeline.activation_checkpoint_interval");
  if (layout.zero_stage == 3 && (per_block || (pipelined && interval > 0)))
    out.notes.push_back("the trainer refuses activation checkpointing with ZeRO stage 3");
  if (!pipelined && v > 1) out.notes.push_back("pipeline.virtual_stages needs pp > 1: one chunk per rank here");

  const nn::LayerList list = nn::gpt_layers(model);
  std::vector<nn::LayerInfo> infos;
  for (const nn::LayerSpec& l : list.layers) infos.push_back({l.type, l.parameters});
  const int chunks = pipelined ? v : 1;
  out.bounds = nn::partition_layers(infos, p * chunks, config.pipeline.partition);
  out.shape = activation_shape(model, layout.micro_batch, out.seq, layout.tp, config.sequence_parallel,
                               config.precision.dtype, config.device.starts_with("cuda"));
  out.residual = residual_bytes(out.shape);
  out.bubble = pipelined ? theoretical_bubble(out.schedule, p, m, chunks, {}) : 0.0;

  const auto sizes = model.parameter_sizes(layout.tp);
  const int last_layer = int(list.layers.size()) - 1;
  for (int r = 0; r < p; ++r) {
    StageMemory st;
    st.rank = r;
    std::set<int> held;
    for (int c = 0; c < chunks; ++c) {
      const int vs = c * p + r;
      st.chunks.push_back({out.bounds[size_t(vs)], out.bounds[size_t(vs) + 1]});
      for (int i = st.chunks.back().first; i < st.chunks.back().last; ++i) held.insert(i);
      const ChunkEstimate e = chunk_estimate(list.layers, out.shape, st.chunks.back().first, st.chunks.back().last,
                                             vs == 0, vs == p * chunks - 1, pipelined, interval, per_block);
      st.micro_batch.push_back(e.bytes);
      st.recompute = std::max(st.recompute, e.recompute);
      if (pipelined) st.send_buffers += double(m) * out.residual * ((vs > 0) + (vs < p * chunks - 1));
    }
    st.embedding = held.count(0) > 0, st.head = held.count(last_layer) > 0;
    st.blocks = int(std::count_if(held.begin(), held.end(), [&](int i) { return i > 0 && i < last_layer; }));
    std::vector<std::pair<std::string, int64_t>> mine;
    double matmul_params = 0;  // what 6N counts: the token table in the head, the lookups free
    for (const auto& [name, n] : sizes) {
      const std::vector<int> of = layers_of(name, model.n_layer);
      if (std::none_of(of.begin(), of.end(), [&](int i) { return held.count(i) > 0; })) continue;
      mine.emplace_back(name, n);
      st.params += double(n);
      if (!name.starts_with("wte.") || st.head) matmul_params += double(n);
    }
    st.persistent = persistent_parameters(mine, threshold);
    st.states = model_state_bytes(layout.zero_stage, {.num_params = st.params,
                                                      .dp = layout.dp,
                                                      .optimizer_bytes = k,
                                                      .persistent_params = double(st.persistent.elements)});
    st.flops_per_token =
        6.0 * matmul_params + 6.0 * double(st.blocks) * double(model.d_model) * double(out.seq) / double(layout.tp);
    // pp 1 runs nn::GPT, one micro-batch after another, whatever the schedule.
    const std::vector<parallel::PipeAction> actions =
        pipelined ? parallel::pipe_actions(out.schedule, p, r, m, chunks)
                  : parallel::pipe_actions(parallel::PipeSchedule::one_f_one_b, 1, 0, m, 1);
    st.peak_live = parallel::peak_live_micro_batches(actions);
    st.activations = peak_activation_bytes(actions, st.micro_batch);
    out.stages.push_back(std::move(st));
  }
  return out;
}

nlohmann::json print_layout_memory(const LayoutMemory& e) {
  const LayoutRequest& l = e.layout;
  const int L = int(e.bounds.back()) - 2;
  std::printf("\nlayout %s, ZeRO stage %d (%s) over dp, %s schedule%s, %d micro-batches of %lld x %lld tokens\n",
              layout_name(l).c_str(), l.zero_stage, stage_name(l.zero_stage), l.schedule.c_str(),
              l.virtual_stages > 1 ? (" (" + std::to_string(l.virtual_stages) + " chunks per rank)").c_str() : "",
              l.micro_batches, (long long)l.micro_batch, (long long)e.seq);
  std::printf("  layers: 0 embedding, 1-%d blocks, %d head; partition %s; activation checkpointing %s\n", L, L + 1,
              e.partition.c_str(), e.checkpointing.c_str());
  std::printf("  bubble (%s closed form): %.4f of the step\n", parallel::pipe_schedule_name(e.schedule).c_str(),
              e.bubble);
  for (const std::string& n : e.notes) std::printf("  note: %s\n", n.c_str());
  std::printf("\nper rank, GB%s\n", l.tp > 1 ? " (one tp rank)" : "");
  std::printf("%5s  %-9s %12s %9s %9s %9s %11s %5s %9s %9s %9s %9s\n", "stage", "layers", "params", "params", "grads",
              "optim", "act/micro", "live", "act", "recomp", "p2p buf", "total");
  nlohmann::json stages = nlohmann::json::array();
  for (const StageMemory& s : e.stages) {
    double per_micro = 0;
    for (const ChunkBytes& c : s.micro_batch) per_micro += c.saved;
    std::printf("%5d  %-9s %12.0f %9.3f %9.3f %9.3f %11.3f %5d %9.3f %9.3f %9.3f %9.3f\n", s.rank,
                ranges_text(s.chunks).c_str(), s.params, s.states.parameters / kGB, s.states.gradients / kGB,
                s.states.optimizer / kGB, per_micro / kGB, s.peak_live, s.activations / kGB, s.recompute / kGB,
                s.send_buffers / kGB, s.total() / kGB);
    nlohmann::json chunks = nlohmann::json::array(), micro = nlohmann::json::array();
    for (size_t c = 0; c < s.chunks.size(); ++c) {
      chunks.push_back({s.chunks[c].first, s.chunks[c].last});
      micro.push_back({{"saved_bytes", s.micro_batch[c].saved}, {"deferred_bytes", s.micro_batch[c].deferred}});
    }
    stages.push_back({{"stage", s.rank},
                      {"layers", chunks},
                      {"blocks", s.blocks},
                      {"embedding", s.embedding},
                      {"head", s.head},
                      {"params", s.params},
                      {"persistent_params", s.persistent.elements},
                      {"params_bytes", s.states.parameters},
                      {"grads_bytes", s.states.gradients},
                      {"optimizer_bytes", s.states.optimizer},
                      {"model_state_bytes", s.states.total()},
                      {"activation_bytes_per_micro_batch", micro},
                      {"peak_live_micro_batches", s.peak_live},
                      {"activation_bytes", s.activations},
                      {"recompute_bytes", s.recompute},
                      {"p2p_buffer_bytes", s.send_buffers},
                      {"total_bytes", s.total()},
                      {"total_gb", s.total() / kGB}});
  }
  std::printf(
      "  act/micro: one micro-batch of the stage's layers; live: micro-batches (x chunks) alive at the peak;"
      " act: the peak; p2p buf: at most, every send of the step undelivered\n");
  return {{"pp", l.pp},
          {"dp", l.dp},
          {"tp", l.tp},
          {"zero_stage", l.zero_stage},
          {"schedule", l.schedule},
          {"virtual_stages", l.virtual_stages},
          {"micro_batches", l.micro_batches},
          {"micro_batch", l.micro_batch},
          {"seq", e.seq},
          {"partition", e.partition},
          {"bounds", e.bounds},
          {"activation_checkpointing", e.checkpointing},
          {"sequence_parallel", e.shape.sequence_parallel},
          {"product_bytes", e.shape.product_bytes},
          {"residual_bytes", e.residual},
          {"bubble", e.bubble},
          {"notes", e.notes},
          {"stages", stages}};
}

}  // namespace triad::estimate
