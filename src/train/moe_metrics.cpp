#include "train/moe_metrics.h"

#include <map>

#include "nn/moe.h"

namespace triad::engine {

namespace {

// Every MoE layer under `m`, by its block index (from its dotted name, "...blocks.{i}.moe").
void find_moe(nn::Module& m, const std::string& name, std::map<int64_t, nn::MoE*>& found) {
  if (auto* moe = dynamic_cast<nn::MoE*>(&m)) {
    const size_t at = name.rfind("blocks.");
    TRIAD_CHECK(at != std::string::npos, "moe_metrics: MoE layer '" << name << "' is not in a block");
    found[std::stoll(name.substr(at + 7))] = moe;
    return;
  }
  for (const auto& [child, module] : m.children()) find_moe(*module, name.empty() ? child : name + "." + child, found);
}

constexpr size_t kScalars = 6;  // forwards, loss, l_aux, z_loss, dropped, choices; then the load

}  // namespace

nlohmann::json moe_metrics(nn::Module& model, const nn::MoEModelConfig& moe, int64_t n_layer,
                           parallel::Communicator* world) {
  if (!moe.enabled()) return nullptr;
  std::map<int64_t, nn::MoE*> held;
  find_moe(model, "", held);
  // One row per MoE block of the model, zeros where this rank holds none: summed over the
  // ranks, each block's row adds up every rank that holds it.
  std::vector<size_t> offset(size_t(n_layer), 0);
  size_t size = 0;
  for (int64_t i = 0; i < n_layer; ++i)
    if (const int64_t E = moe.at(i).num_experts; E != 0) offset[size_t(i)] = size, size += kScalars + size_t(E);
  std::vector<double> rows(size, 0.0);
  for (const auto& [block, layer] : held) {
    const nn::MoETotals t = layer->take_totals();
    double* row = rows.data() + offset[size_t(block)];
    row[0] = double(t.forwards), row[1] = t.loss, row[2] = t.l_aux, row[3] = t.z_loss;
    row[4] = double(t.dropped), row[5] = double(t.choices);
    for (size_t e = 0; e < t.load.size(); ++e) row[kScalars + e] = double(t.load[e]);
  }
  if (world && world->size() > 1) {
    Tensor sums = Tensor::from_vector(rows, {int64_t(size)});
    world->all_reduce(sums, parallel::ReduceOp::sum)->wait();
    std::copy(sums.data<double>(), sums.data<double>() + size, rows.begin());
  }
  nlohmann::json layers = nlohmann::json::array();
  double loss = 0, dropped = 0, choices = 0;
  for (int64_t i = 0; i < n_layer; ++i) {
    const int64_t E = moe.at(i).num_experts;
    if (E == 0) continue;
    const double* row = rows.data() + offset[size_t(i)];
    const double forwards = std::max(row[0], 1.0), n = std::max(row[5], 1.0);
    loss += row[1] / forwards;
    dropped += row[4], choices += row[5];
    nlohmann::json load = nlohmann::json::array();
    for (int64_t e = 0; e < E; ++e) load.push_back(row[kScalars + size_t(e)] / n);
    layers.push_back({{"block", i},
                      {"l_aux", row[2] / forwards},
                      {"z_loss", row[3] / forwards},
                      {"dropped_fraction", row[4] / n},
                      {"load", load}});
  }
  return {{"loss", loss}, {"dropped_fraction", dropped / std::max(choices, 1.0)}, {"layers", layers}};
}

}  // namespace triad::engine
