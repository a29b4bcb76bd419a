#include "rlhf/sft_training.h"

#include "config/model_factory.h"
#include "train/trainer.h"
#include "rlhf/sft_data.h"

namespace triad::rlhf {

double train_sft(const StepConfig& sc, const RunOptions& options, parallel::CommunicatorPtr world) {
  const engine::TrainConfig& c = sc.model.train;
  const SftDataOptions data{.path = sc.data.path,
                            .data_split = sc.data.data_split,
                            .limits = sc.data.limits,
                            .val_fraction = sc.data.val_fraction,
                            .include_prompt = sc.include_prompt,
                            .seed = c.seed};
  const engine::TrainOptions run{
      .metrics_path = options.metrics_path, .resume = options.resume, .save_dir = "", .init = sc.model.init};
  return engine::train(c, run, std::move(world),
                       sft_data(data, *io::load_tokenizer(sc.data.tokenizer), engine::model_shape(c).seq_len));
}

}  // namespace triad::rlhf
