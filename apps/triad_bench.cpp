// triad-bench: benchmark programs. Each subcommand prints a readable table and, as its last
// line, one JSON object with its figures.
#include <CLI/CLI.hpp>

#include "bench/attention.h"
#include "bench/ckpt.h"
#include "bench/collectives.h"
#include "bench/generate.h"
#include "bench/moe.h"
#include "bench/offload.h"
#include "bench/pipeline.h"
#include "bench/rlhf.h"
#include "bench/quantize.h"
#include "bench/quantized.h"
#include "bench/scaling.h"
#include "bench/step.h"
#include "bench/zero.h"
#include "common/main_guard.h"

int main(int argc, char** argv) {
  return triad::app::guarded_main([&] {
    CLI::App app{"triad-bench: training-step, attention, ZeRO, pipeline, collective, checkpoint I/O, quantization, RLHF, generation, MoE and NVMe offload benchmarks"};
    app.require_subcommand(1);
    triad::bench::StepOptions step;
    triad::bench::add_step_command(app, step);
    triad::bench::ZeroOptions zero;
    triad::bench::add_zero_command(app, zero);
    triad::bench::CkptOptions ckpt;
    triad::bench::add_ckpt_command(app, ckpt);
    triad::bench::CollectivesOptions collectives;
    int status = 0;  // the collectives and attention subcommands fail when a result was wrong
    triad::bench::add_collectives_command(app, collectives, status);
    triad::bench::AttentionOptions attention;
    triad::bench::add_attention_command(app, attention, status);
    triad::bench::PipelineOptions pipeline;
    triad::bench::add_pipeline_command(app, pipeline);
    triad::bench::ScalingOptions scaling;
    triad::bench::add_scaling_command(app, scaling);
    triad::bench::QuantizeOptions quantize;
    triad::bench::add_quantize_command(app, quantize);
    triad::bench::QuantizedOptions quantized;
    triad::bench::add_quantized_command(app, quantized);
    triad::bench::RlhfBenchOptions rlhf;
    triad::bench::add_rlhf_command(app, rlhf);
    triad::bench::GenerateOptions generate;
    triad::bench::add_generate_command(app, generate);
    triad::bench::MoEBenchOptions moe;
    triad::bench::add_moe_command(app, moe);
    triad::bench::OffloadBenchOptions offload;
    triad::bench::add_offload_command(app, offload);
    CLI11_PARSE(app, argc, argv);
    return status;
  });
}
