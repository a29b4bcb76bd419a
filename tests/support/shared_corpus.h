// Multi-rank training tests run one config on every rank: rank 0's scratch folder, with a
// small token corpus written there, is made known to every rank.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "io/token_file.h"
#include "parallel/communicator.h"
#include "support/files.h"
#include "triad.h"

namespace triad::test {

// Rank 0's folder, known to every rank (collective).
inline std::string shared_folder(const TempDir& dir, parallel::Communicator& world) {
  std::string path = dir.path().string();
  Tensor bytes = Tensor::zeros({256}, DType::i8);
  std::copy(path.begin(), path.end(), bytes.data<int8_t>());
  world.broadcast(bytes, 0)->wait();
  return std::string(reinterpret_cast<const char*>(bytes.data<int8_t>()));
}

// Rank 0's folder holding tokens.bin, 8000 tokens of a learnable pattern over a vocabulary
// of 16 (small_gpt_config's), written before any rank returns (collective).
inline std::string shared_corpus(const TempDir& dir, parallel::Communicator& world) {
  const std::string folder = shared_folder(dir, world);
  if (world.rank() == 0) {
    std::vector<uint32_t> tokens;
    for (uint32_t i = 0; i < 8000; ++i) tokens.push_back((i * 7u + (i / 13u) * 3u) % 16u);
    io::write_token_file(folder + "/tokens.bin", tokens, 16);
  }
  world.barrier();
  return folder;
}

}  // namespace triad::test
