// Byte runs: a batch of transfers between memory and a file, grouped so that pieces which
// continue each other both in the file and in memory move in one system call. A rank's
// part of a checkpoint state is such a batch: its shard holds the tail of one parameter,
// the next parameters whole and the head of another, back to back in memory, and the
// file stores those parameters' datasets back to back too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace triad::io {

// bytes bytes at file offset `offset` and memory address `memory`; offset < 0: a piece
// that has no place of its own in the file (moved some other way, never grouped).
struct BytePiece {
  int64_t offset;
  unsigned char* memory;
  int64_t bytes;
};

// Pieces [first, last) of a batch, which form one run: `bytes` bytes from `offset` in the
// file and `memory` in memory (offset < 0: the single piece `first`, which has none).
struct ByteRun {
  size_t first, last;
  int64_t offset;
  unsigned char* memory;
  int64_t bytes;
};

// The runs of `pieces`, in order, covering each piece once. With `merge`, a piece joins
// the run before it when both have file offsets and it starts where the run ends, in the
// file and in memory (a piece of no bytes always continues a run with an offset);
// without, every piece is a run of its own.
inline std::vector<ByteRun> byte_runs(const std::vector<BytePiece>& pieces, bool merge) {
  std::vector<ByteRun> runs;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const BytePiece& p = pieces[i];
    if (merge && !runs.empty() && p.offset >= 0) {
      ByteRun& r = runs.back();
      const bool continues = p.bytes == 0 || (p.offset == r.offset + r.bytes && p.memory == r.memory + r.bytes);
      if (r.offset >= 0 && continues) {
        r.last = i + 1;
        r.bytes += p.bytes;
        continue;
      }
    }
    runs.push_back({i, i + 1, p.offset, p.memory, p.bytes});
  }
  return runs;
}

}  // namespace triad::io
