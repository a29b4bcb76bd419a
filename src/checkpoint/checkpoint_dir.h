// A run's checkpoint folder: checkpoints named by step (step-00000120.h5) and `latest`, a
// one-line text file naming the newest complete checkpoint. A save writes the checkpoint
// (checkpoint/checkpoint.h: temporary name, synced, renamed), then replaces `latest` the same
// way, then removes the oldest checkpoints beyond `keep`: a run killed at any point leaves
// `latest` naming a complete checkpoint.
#pragma once

#include <string>
#include <vector>

#include "engine/engine.h"
#include "parallel/communicator.h"

namespace triad::engine {

std::string checkpoint_file_name(int64_t step);  // "step-00000120.h5"

// Collective: rank 0 creates the folder (and its parents); an Error on every rank if it cannot.
void create_folder(const std::string& dir, parallel::Communicator& world);

// Collective: saves the engine's state as dir/step-<step>.h5 (creating dir), points
// `latest` at it and keeps the newest `keep` checkpoints (0: all). Returns the path.
std::string save_to_dir(const std::string& dir, int64_t keep, Engine& engine, parallel::Communicator& world);

// Serial: points `latest` in dir at its checkpoint `name` (replacing the file atomically).
void point_latest(const std::string& dir, const std::string& name);

// The checkpoint `latest` in dir names, as a path; "" when dir has no `latest`. Throws Error
// naming `latest` when it names a file that does not exist.
std::string latest_checkpoint(const std::string& dir);
// The checkpoints in dir, newest step first (temporary files of interrupted saves excluded).
std::vector<std::string> checkpoints_newest_first(const std::string& dir);

// Collective: restores the engine from `spec`, which is a checkpoint file, a checkpoint
// folder (its latest), or "auto": the latest in `dir`, or, when that is missing or fails to
// load, the newest checkpoint in `dir` that loads, saying so; a fresh start when `dir` holds
// no checkpoint at all. Returns the path loaded ("" for a fresh start).
std::string resume(const std::string& spec, const std::string& dir, Engine& engine, parallel::Communicator& world);

}  // namespace triad::engine
