#include "profiler/flops_profiler.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "autograd/flop_count.h"
#include "cuda/runtime.h"

namespace triad::engine {

namespace {

using Clock = std::chrono::steady_clock;

struct Open {  // a module whose forward is running
  FlopCount at;
  Clock::time_point since;
};

std::string rounded(double value) {  // Python's f"{round(value, 2):g}"
  char text[64];
  std::snprintf(text, sizeof text, "%g", std::round(value * 100) / 100);
  return text;
}

std::string percent(double part, double total) { return rounded(total > 0 ? 100 * part / total : 0) + "%"; }

std::string line(const std::string& label, const std::string& value) {
  char text[256];
  std::snprintf(text, sizeof text, "%-70s  %-8s\n", label.c_str(), value.c_str());
  return text;
}

}  // namespace

std::string number_to_string(double value, const std::string& suffix) {
  static const std::pair<double, const char*> units[] = {{1e12, "T"}, {1e9, "G"}, {1e6, "M"},  {1e3, "K"},
                                                         {1.0, ""},   {1e-3, "m"}, {1e-6, "u"}};
  for (const auto& [magnitude, unit] : units)
    if (value >= magnitude || (magnitude == 1.0 && value == 0) || magnitude == 1e-6)
      return rounded(value / magnitude) + (*unit || !suffix.empty() ? " " : "") + unit + suffix;
  return "";
}

struct FlopsProfiler::State {
  Device device;
  bool active = false;
  std::vector<ModuleStats> modules;
  std::vector<Open> open;

  void synchronize() const {
    if (device.is_cuda()) cuda::synchronize(device.index);
  }
};

FlopsProfiler::FlopsProfiler(const nn::ModulePtr& model, Device device) : state_(std::make_shared<State>()) {
  state_->device = device;
  std::map<std::string, size_t> index;
  for (const auto& [name, module] : model->named_modules(model)) {
    const size_t i = state_->modules.size();
    ModuleStats s;
    s.name = name, s.type = module->type_name();
    s.depth = name.empty() ? 0 : 1 + int(std::count(name.begin(), name.end(), '.'));
    for (const Tensor& p : module->parameters()) s.params += p.numel();
    state_->modules.push_back(s);
    index[name] = i;
    if (!name.empty()) {
      const size_t dot = name.rfind('.');
      state_->modules[index[dot == std::string::npos ? "" : name.substr(0, dot)]].children.push_back(i);
    }
    std::weak_ptr<State> weak = state_;
    module->register_forward_pre_hook([weak](nn::Module&) {
      auto state = weak.lock();
      if (!state || !state->active) return;
      state->synchronize();
      state->open.push_back({flop_count::totals(), Clock::now()});
    });
    module->register_forward_hook([weak, i](nn::Module&) {
      auto state = weak.lock();
      if (!state || !state->active || state->open.empty()) return;
      state->synchronize();
      const Open o = state->open.back();
      state->open.pop_back();
      ModuleStats& s = state->modules[i];
      s.macs += flop_count::totals().macs - o.at.macs;
      s.flops += flop_count::totals().flops - o.at.flops;
      s.seconds += std::chrono::duration<double>(Clock::now() - o.since).count();
    });
  }
}

void FlopsProfiler::start() {
  for (ModuleStats& s : state_->modules) s.macs = s.flops = 0, s.seconds = 0;
  state_->open.clear();
  state_->active = flop_count::enabled() = true;
}

void FlopsProfiler::stop() { state_->active = flop_count::enabled() = false; }

const std::vector<FlopsProfiler::ModuleStats>& FlopsProfiler::modules() const { return state_->modules; }

std::string FlopsProfiler::report(const ProfiledStep& p, const FlopsProfilerConfig& config) const {
  const std::vector<ModuleStats>& ms = state_->modules;
  const ModuleStats& total = ms.front();
  const double flops = double(total.flops), bwd_factor = 2 + config.recompute_fwd_factor;
  const auto flops_per_s = [](double f, double s) { return number_to_string(s > 0 ? f / s : 0, "FLOPS"); };
  std::ostringstream out;
  out << "\n-------------------------- DeepSpeed Flops Profiler --------------------------\n"
      << "Profile Summary at step " << p.step << ":\n"
      << "Notations:\n"
         "data parallel size (dp_size), model parallel size(mp_size),\n"
         "number of parameters (params), number of multiply-accumulate operations(MACs),\n"
         "number of floating-point operations (flops), floating-point operations per second (FLOPS),\n"
         "fwd latency (forward propagation latency), bwd latency (backward propagation latency),\n"
         "step (weights update latency), iter latency (sum of fwd, bwd and step latency)\n\n";
  out << line("world size: ", std::to_string(p.world_size))
      << line("data parallel size: ", std::to_string(p.data_parallel))
      << line("model parallel size: ", std::to_string(p.model_parallel))
      << line("batch size per GPU: ", std::to_string(p.micro_batch))
      << line("params per GPU: ", number_to_string(double(total.params)))
      << line("params of model = params per GPU * mp_size: ",
              number_to_string(double(total.params) * p.model_parallel))
      << line("fwd MACs per GPU: ", number_to_string(double(total.macs), "MACs"))
      << line("fwd flops per GPU: ", number_to_string(flops))
      << line("fwd flops of model = fwd flops per GPU * mp_size: ", number_to_string(flops * p.model_parallel))
      << line("fwd latency: ", number_to_string(p.forward_s, "s"))
      << line("fwd FLOPS per GPU = fwd flops per GPU / fwd latency: ", flops_per_s(flops, p.forward_s))
      << line("bwd latency: ", number_to_string(p.backward_s, "s"))
      << line("bwd FLOPS per GPU = " + rounded(bwd_factor) + " * fwd flops per GPU / bwd latency: ",
              flops_per_s(bwd_factor * flops, p.backward_s))
      << line("fwd+bwd FLOPS per GPU = " + rounded(bwd_factor + 1) + " * fwd flops per GPU / (fwd+bwd latency): ",
              flops_per_s((bwd_factor + 1) * flops, p.forward_s + p.backward_s))
      << line("step latency: ", number_to_string(p.step_s, "s"));
  const double iter = p.forward_s + p.backward_s + p.step_s;
  out << line("iter latency: ", number_to_string(iter, "s"))
      << line("FLOPS per GPU = " + rounded(bwd_factor + 1) + " * fwd flops per GPU / iter latency: ",
              flops_per_s((bwd_factor + 1) * flops, iter))
      << line("samples/second: ", rounded(iter > 0 ? double(p.micro_batch * p.world_size) / iter : 0));

  // Aggregated: per depth, the modules' figures summed by type, the top ones of each.
  int depths = 0;
  for (const ModuleStats& s : ms) depths = std::max(depths, s.depth + 1);
  if (config.module_depth >= 0) depths = std::min<int>(depths, int(config.module_depth) + 1);
  out << "\n----------------------------- Aggregated Profile per GPU -----------------------------\n"
      << "Top " << config.top_modules << " modules in terms of params, MACs or fwd latency at different model depths:\n";
  for (int d = 0; d < depths; ++d) {
    std::map<std::string, ModuleStats> by_type;
    std::vector<std::string> order;  // types in first-seen order: ties keep the model's order
    for (const ModuleStats& s : ms) {
      if (s.depth != d) continue;
      if (!by_type.count(s.type)) order.push_back(s.type);
      ModuleStats& t = by_type[s.type];
      t.params += s.params, t.macs += s.macs, t.seconds += s.seconds;
    }
    const auto top = [&](auto key, auto show) {
      std::vector<std::string> types = order;
      std::stable_sort(types.begin(), types.end(),
                       [&](const std::string& a, const std::string& b) { return key(by_type[a]) > key(by_type[b]); });
      types.resize(std::min<size_t>(types.size(), size_t(config.top_modules)));
      std::string text = "{";
      for (size_t i = 0; i < types.size(); ++i)
        text += (i ? ", '" : "'") + types[i] + "': '" + show(by_type[types[i]]) + "'";
      return text + "}";
    };
    out << "depth " << d << ":\n"
        << "    params      - "
        << top([](const ModuleStats& s) { return double(s.params); },
               [](const ModuleStats& s) { return number_to_string(double(s.params)); })
        << "\n    MACs        - "
        << top([](const ModuleStats& s) { return double(s.macs); },
               [](const ModuleStats& s) { return number_to_string(double(s.macs), "MACs"); })
        << "\n    fwd latency - "
        << top([](const ModuleStats& s) { return s.seconds; },
               [](const ModuleStats& s) { return number_to_string(s.seconds, "s"); })
        << "\n";
  }

  if (config.detailed) {
    out << "\n------------------------------ Detailed Profile per GPU ------------------------------\n"
        << "Each module profile is listed after its name in the following order: \n"
           "params, percentage of total params, MACs, percentage of total MACs, fwd latency, percentage of total "
           "fwd latency, fwd FLOPS\n\n"
           "Note: 1. A module can compute parts of its output without submodules (the GPT's loss, an embedding read "
           "directly): they make up the difference between a parent's MACs (or latency) and the sum of its "
           "submodules'.\n"
           "2. Number of floating-point operations is a theoretical estimation, thus FLOPS computed using that could "
           "be larger than the maximum system throughput.\n"
           "3. The fwd latency listed in the top module's profile is directly captured at the module forward "
           "function, thus it's less than the fwd latency shown above which is captured by the trainer.\n\n";
    const auto figures = [&](const ModuleStats& s) {
      return number_to_string(double(s.params)) + " = " + percent(double(s.params), double(total.params)) +
             " Params, " + number_to_string(double(s.macs), "MACs") + " = " +
             percent(double(s.macs), double(total.macs)) + " MACs, " + number_to_string(s.seconds, "s") + " = " +
             percent(s.seconds, total.seconds) + " latency, " + flops_per_s(double(s.flops), s.seconds);
    };
    const auto print = [&](const auto& self, size_t i, const std::string& indent) -> void {
      const ModuleStats& s = ms[i];
      std::string label;
      if (!s.name.empty()) label.append("(").append(s.name.substr(s.name.rfind('.') + 1)).append("): ");
      label.append(s.type);
      if (s.children.empty()) {
        out << indent << label << "(" << figures(s) << ")\n";
        return;
      }
      out << indent << label << "(\n" << indent << "  " << figures(s) << ",\n";
      for (size_t c : s.children) self(self, c, indent + "  ");
      out << indent << ")\n";
    };
    print(print, 0, "");
  }
  out << "------------------------------------------------------------------------------\n";
  return out.str();
}

}  // namespace triad::engine
