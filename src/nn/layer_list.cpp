#include "nn/layer_list.h"

#include <algorithm>
#include <functional>
#include <set>

#include "autograd/checkpoint.h"
#include "autograd/meta.h"

namespace triad::nn {

namespace {

// A module that only names others (the "blocks" of blocks.3), as ModuleList does for
// consecutive indices.
class Namespace : public Module {
 public:
  Namespace() : Module("ModuleList") {}
  void add(const std::string& name, ModulePtr m) { register_module(name, std::move(m)); }
  Module* find(const std::string& name) const {
    for (const auto& [n, m] : children())
      if (n == name) return m.get();
    return nullptr;
  }
};

}  // namespace

PipelineStage::PipelineStage(const LayerList& list, std::vector<LayerRange> chunks, int activation_checkpoint_interval)
    : Module("PipelineStage"),
      chunks_(std::move(chunks)),
      last_layer_(int(list.layers.size()) - 1),
      loss_(list.loss),
      head_loss_(list.head_loss),
      checkpoint_interval_(activation_checkpoint_interval) {
  TRIAD_CHECK(!chunks_.empty(), "PipelineStage: no layers");
  TRIAD_CHECK(activation_checkpoint_interval >= 0,
              "[config] pipeline.activation_checkpoint_interval must be >= 0, got " << activation_checkpoint_interval);
  std::set<std::string> keys;
  for (const LayerRange& r : chunks_) {
    TRIAD_CHECK(r.first >= 0 && r.first < r.last && r.last <= int(list.layers.size()),
                "PipelineStage: layer range [" << r.first << ", " << r.last << ") outside the model's "
                                               << list.layers.size() << " layers");
    for (int i = r.first; i < r.last; ++i) keys.insert(list.layers[size_t(i)].ties.begin(), list.layers[size_t(i)].ties.end());
  }
  // Modules at dotted paths ("blocks.3", "base.blocks.3") sit in namespaces made for their
  // outer parts, one per path ("base", "base.blocks").
  std::map<std::string, std::shared_ptr<Namespace>> spaces;
  std::function<void(const std::string&, ModulePtr)> place = [&](const std::string& path, ModulePtr m) {
    const size_t dot = path.rfind('.');
    if (dot == std::string::npos) {
      register_module(path, std::move(m));
      return;
    }
    const std::string outer = path.substr(0, dot);
    std::shared_ptr<Namespace>& space = spaces[outer];
    if (!space) {
      space = std::make_shared<Namespace>();
      place(outer, space);
    }
    space->add(path.substr(dot + 1), std::move(m));
  };
  // Tied modules first, each at its key (Note [Tied layers]).
  for (const TiedSpec& t : list.tied)
    if (keys.count(t.key)) {
      tied_[t.key] = t.build();
      place(t.key, tied_[t.key]);
    }
  for (const std::string& k : keys)
    TRIAD_CHECK(tied_.count(k), "PipelineStage: a layer uses tied module '" << k << "', which the list does not declare");
  for (const LayerRange& r : chunks_) {
    layers_.emplace_back();
    for (int i = r.first; i < r.last; ++i) {
      const LayerSpec& spec = list.layers[size_t(i)];
      TiedModules given;
      for (const std::string& k : spec.ties) given[k] = tied_.at(k);
      ModulePtr layer = spec.build(given);
      TRIAD_CHECK(layer, "PipelineStage: layer " << i << " (" << spec.type << ") built nothing");
      layers_.back().push_back(layer);
      if (spec.name.empty() || spec.name.ends_with('.')) {  // its children at the root, or in the namespace
        for (const auto& [n, child] : layer->children()) place(spec.name + n, child);
        continue;
      }
      place(spec.name, layer);
    }
  }
  if (list.init) list.init(*this);
}

std::vector<std::string> PipelineStage::tied_keys() const {
  std::vector<std::string> keys;
  for (const auto& [k, _] : tied_) keys.push_back(k);
  return keys;
}

std::vector<Tensor> PipelineStage::chunk_parameters(int chunk) const {
  auto parameters_of = [&](int c) {
    std::vector<Tensor> out;
    for (const ModulePtr& layer : layers_[size_t(c)])
      for (const Tensor& p : layer->parameters())
        if (std::none_of(out.begin(), out.end(), [&](const Tensor& q) { return q.is_same(p); })) out.push_back(p);
    return out;
  };
  std::vector<Tensor> mine = parameters_of(chunk);
  for (int c = 0; c < chunks(); ++c) {
    if (c == chunk) continue;
    const std::vector<Tensor> theirs = parameters_of(c);
    std::erase_if(mine, [&](const Tensor& p) {
      return std::any_of(theirs.begin(), theirs.end(), [&](const Tensor& q) { return q.is_same(p); });
    });
  }
  return mine;
}

Tensor PipelineStage::run_layers(int chunk, const Tensor& x, size_t count) {
  const std::vector<ModulePtr>& layers = layers_[size_t(chunk)];
  Tensor h = x;
  for (size_t i = 0; i < count;) {
    if (checkpoint_interval_ == 0 || !is_training() || !requires_grad(h)) {
      h = (*layers[i++])(h);
      continue;
    }
    const size_t end = std::min(count, i + size_t(checkpoint_interval_));
    h = checkpoint(
        [&layers, i, end](const Tensor& in) {
          Tensor y = in;
          for (size_t k = i; k < end; ++k) y = (*layers[k])(y);
          return y;
        },
        h);
    i = end;
  }
  return h;
}

Tensor PipelineStage::forward_chunk(int chunk, const Tensor& x) {
  TRIAD_CHECK(chunk >= 0 && chunk < chunks(), "PipelineStage: chunk " << chunk << " of " << chunks());
  return call([&] { return run_layers(chunk, x, layers_[size_t(chunk)].size()); });
}

Tensor PipelineStage::forward_loss(int chunk, const Tensor& x, const Tensor& targets) {
  TRIAD_CHECK(chunk >= 0 && chunk < chunks() && range(chunk).last == last_layer_ + 1,
              "PipelineStage: the loss is taken on the chunk holding the last layer, not chunk " << chunk);
  TRIAD_CHECK(loss_, "PipelineStage: the layer list has no loss");
  if (!head_loss_) return loss_(forward_chunk(chunk, x), targets);
  return call([&] {
    const std::vector<ModulePtr>& layers = layers_[size_t(chunk)];
    const Tensor h = run_layers(chunk, x, layers.size() - 1);
    Module& head = *layers.back();
    return head.call([&] { return head_loss_(head, h, targets); });
  });
}

Tensor PipelineStage::forward(const Tensor& x) {
  TRIAD_CHECK(chunks() == 1, "PipelineStage: forward() runs a stage of one chunk; this one has " << chunks());
  return run_layers(0, x, layers_[0].size());
}

}  // namespace triad::nn
