#include "zero/nvme_swap_file.h"

#include <sys/stat.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "parallel/runtime.h"
#include "tensor/error.h"
#include "tensor/storage.h"

namespace triad::zero {

namespace {

std::atomic<int> files_made{0};

}  // namespace

std::unique_ptr<io::SwapFile> open_nvme_swap_file(const std::string& key, const std::string& folder,
                                                  const std::string& kind, const io::AioConfig& aio) {
  const std::string named = "[config] " + key + " '" + folder + "'";
  struct stat st{};
  if (::stat(folder.c_str(), &st) != 0) throw Error(named + ": " + std::strerror(errno));
  TRIAD_CHECK(S_ISDIR(st.st_mode), named << " is not a folder");
  const std::string name =
      "triad-" + kind + "-rank" + std::to_string(parallel::world_rank()) + "-" + std::to_string(files_made++) + ".swp";
  try {
    return std::make_unique<io::SwapFile>((std::filesystem::path(folder) / name).string(), 0, aio);
  } catch (const Error& e) {
    throw Error(named + ": " + e.what());
  }
}

Tensor aligned_host(int64_t bytes) {
  io::AlignedBuffer block = io::aligned_buffer(bytes);
  auto storage = std::make_shared<Storage>(block.get(), size_t(bytes), Device::cpu(), [](void* p) { std::free(p); });
  block.release();  // the storage frees it
  return Tensor::from_storage(storage, {bytes / 4}, {1}, 0, DType::f32);
}

}  // namespace triad::zero
