// The occupancy calculator (cuOccupancy*): how many blocks of a function fit on
// one multiprocessor, from the function's attributes (registers, static shared
// memory, its thread limit: sent when it was resolved) and the device's limits
// (the handshake snapshot). Libraries (CUB, cuBLAS, Triton) size their grids
// with it, so it is answered locally, by the same rules the CUDA occupancy
// calculator documents: warps, registers (allocated per warp in units of 256)
// and shared memory (plus the driver's per-block reservation) each bound the
// count, and so does the per-multiprocessor block limit.
#include <algorithm>

#include "connection/connection.h"
#include "driver_objects.h"
#include "entry_points/entry_point.h"
#include "launch/occupancy.h"

namespace tally::client {

namespace {
constexpr int kWarp = 32;
constexpr int kRegisterUnit = 256;
}  // namespace

int device_attribute(CUdevice_attribute a, int fallback) {
  const int v = Connection::instance().device().attributes[a];
  return v > 0 ? v : fallback;
}

int blocks_per_sm(const FunctionObject* fn, int block_size, size_t dynamic_shared) {
  if (block_size <= 0 || block_size > fn->attributes[CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK].load()) return 0;
  const int warps = (block_size + kWarp - 1) / kWarp;
  int limit = device_attribute(CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR, 32);
  limit = std::min(limit, device_attribute(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, 2048) / kWarp / warps);
  const int regs = fn->attributes[CU_FUNC_ATTRIBUTE_NUM_REGS].load();
  if (regs > 0) {
    const int per_warp = (regs * kWarp + kRegisterUnit - 1) / kRegisterUnit * kRegisterUnit;
    const int warps_by_registers = device_attribute(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR, 65536) / per_warp;
    limit = std::min(limit, warps_by_registers / warps);
  }
  const size_t shared = dynamic_shared + static_cast<size_t>(fn->attributes[CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES].load());
  if (shared > 0) {
    const size_t per_block = shared + device_attribute(CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK, 0);
    const size_t per_sm = device_attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, 48 << 10);
    const int max_dynamic = fn->attributes[CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES].load();
    if (dynamic_shared > static_cast<size_t>(std::max(max_dynamic, 0))) return 0;
    limit = std::min<int>(limit, static_cast<int>(per_sm / per_block));
  }
  return std::max(limit, 0);
}

namespace {

CUresult max_active_blocks(int* num_blocks, CUfunction func, int block_size, size_t dynamic_shared) {
  if (num_blocks == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  const FunctionObject* fn = as_function(func);
  if (fn == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  *num_blocks = blocks_per_sm(fn, block_size, dynamic_shared);
  return CUDA_SUCCESS;
}

// The block size with the most resident threads per multiprocessor (largest
// such size on ties), and the grid that fills the device with it.
CUresult max_potential_block_size(int* min_grid, int* block_size, CUfunction func, CUoccupancyB2DSize shared_of,
                                  size_t dynamic_shared, int block_size_limit) {
  if (min_grid == nullptr || block_size == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  const FunctionObject* fn = as_function(func);
  if (fn == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  int top = fn->attributes[CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK].load();
  if (block_size_limit > 0) top = std::min(top, block_size_limit);
  int best_size = 0, best_threads = 0, best_blocks = 0;
  for (int size = (top / kWarp) * kWarp; size >= kWarp; size -= kWarp) {
    const size_t shared = shared_of != nullptr ? shared_of(size) : dynamic_shared;
    const int blocks = blocks_per_sm(fn, size, shared);
    if (blocks * size > best_threads) best_size = size, best_threads = blocks * size, best_blocks = blocks;
  }
  *block_size = best_size;
  *min_grid = best_blocks * device_attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 1);
  return CUDA_SUCCESS;
}

}  // namespace
}  // namespace tally::client

using namespace tally::client;

TALLY_ENTRY(cuOccupancyMaxActiveBlocksPerMultiprocessor_v6050)(int* numBlocks, CUfunction func, int blockSize,
                                                              size_t dynamicSMemSize) {
  return max_active_blocks(numBlocks, func, blockSize, dynamicSMemSize);
}
TALLY_ENTRY(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags_v7000)(int* numBlocks, CUfunction func,
                                                                       int blockSize, size_t dynamicSMemSize,
                                                                       unsigned int flags) {
  (void)flags;  // caching override: no effect on these limits
  return max_active_blocks(numBlocks, func, blockSize, dynamicSMemSize);
}
TALLY_ENTRY(cuOccupancyMaxPotentialBlockSize_v6050)(int* minGridSize, int* blockSize, CUfunction func,
                                                   CUoccupancyB2DSize blockSizeToDynamicSMemSize,
                                                   size_t dynamicSMemSize, int blockSizeLimit) {
  return max_potential_block_size(minGridSize, blockSize, func, blockSizeToDynamicSMemSize, dynamicSMemSize,
                                  blockSizeLimit);
}
TALLY_ENTRY(cuOccupancyMaxPotentialBlockSizeWithFlags_v7000)(int* minGridSize, int* blockSize, CUfunction func,
                                                            CUoccupancyB2DSize blockSizeToDynamicSMemSize,
                                                            size_t dynamicSMemSize, int blockSizeLimit,
                                                            unsigned int flags) {
  (void)flags;
  return max_potential_block_size(minGridSize, blockSize, func, blockSizeToDynamicSMemSize, dynamicSMemSize,
                                  blockSizeLimit);
}
TALLY_ENTRY(cuOccupancyAvailableDynamicSMemPerBlock_v10020)(size_t* dynamicSmemSize, CUfunction func, int numBlocks,
                                                           int blockSize) {
  if (dynamicSmemSize == nullptr || numBlocks <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  const FunctionObject* fn = as_function(func);
  if (fn == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (blocks_per_sm(fn, blockSize, 0) < numBlocks) {
    *dynamicSmemSize = 0;
    return CUDA_SUCCESS;
  }
  const size_t per_sm = device_attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, 48 << 10);
  const size_t reserved = device_attribute(CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK, 0);
  const size_t static_bytes = fn->attributes[CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES].load();
  const size_t share = per_sm / numBlocks;
  size_t available = share > reserved + static_bytes ? share - reserved - static_bytes : 0;
  available = std::min<size_t>(available, std::max(fn->attributes[CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES].load(), 0));
  *dynamicSmemSize = available;
  return CUDA_SUCCESS;
}
