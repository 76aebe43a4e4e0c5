// A warp-specialized TMA kernel launched many times, for tally's transforms: in
// each of 128 blocks warp 0 loads two 16 x 16 tiles of a 256 x 256 float tensor with
// cp.async.bulk.tensor into a two-stage ring guarded by full/empty mbarriers, and
// warps 1-2 sum each tile's rows into out. Prints "results correct" when every
// launch's sums match the host's.   tma_pipeline [launches]
#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define RT(call) do { cudaError_t e = (call); if (e != cudaSuccess) { \
  printf("error %s -> %d\n", #call, (int)e); return 1; } } while (0)

static const int kN = 256, kTile = 16, kTilesPerBlock = 2, kTilesPerRow = kN / kTile, kTiles = kTilesPerRow * kTilesPerRow;

__device__ __forceinline__ unsigned smem(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void wait_parity(uint64_t* bar, unsigned parity) {
  asm volatile("{ .reg .pred p;\nW_%=: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n@!p bra W_%=; }"
               :: "r"(smem(bar)), "r"(parity) : "memory");
}

// Block b handles tiles 2b and 2b+1 of the 256 tiles (16 x 16); out[tile * 16 + row] = row sum * scale.
__global__ void row_sums(const __grid_constant__ CUtensorMap map, float* out, float scale) {
  __shared__ alignas(128) float stage[2][kTile * kTile];
  __shared__ uint64_t full[2], empty[2];
  unsigned warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    for (int s = 0; s < 2; ++s) {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(smem(&full[s])) : "memory");
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 2;" :: "r"(smem(&empty[s])) : "memory");
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (warp == 0) {
    for (int t = 0; t < kTilesPerBlock; ++t) {
      int tile = blockIdx.x * kTilesPerBlock + t;
      if (lane == 0) {
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                     :: "r"(smem(&full[t])), "r"((unsigned)sizeof stage[0]) : "memory");
        asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                     " [%0], [%1, {%2, %3}], [%4];"
                     :: "r"(smem(stage[t])), "l"(&map), "r"((tile % kTilesPerRow) * kTile), "r"((tile / kTilesPerRow) * kTile),
                        "r"(smem(&full[t])) : "memory");
      }
    }
    for (int t = 0; t < kTilesPerBlock; ++t) wait_parity(&empty[t], 0);
  } else {
    for (int t = 0; t < kTilesPerBlock; ++t) {
      int tile = blockIdx.x * kTilesPerBlock + t;
      wait_parity(&full[t], 0);
      int row = (warp - 1) * 8 + lane / 4;          // warps 1-2: 8 rows each, 4 lanes per row
      float sum = 0;
      for (int c = lane % 4; c < kTile; c += 4) sum += stage[t][row * kTile + c];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      if (lane % 4 == 0) out[tile * kTile + row] = sum * scale;
      __syncwarp();
      if (lane == 0) asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(smem(&empty[t])) : "memory");
    }
  }
}

int main(int argc, char** argv) {
  int launches = argc > 1 ? atoi(argv[1]) : 50;
  PFN_cuTensorMapEncodeTiled_v12000 encode;
  cudaDriverEntryPointQueryResult found;
  RT(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", (void**)&encode, 12000, cudaEnableDefault, &found));
  static float host[kN * kN], sums[kN * kN / kTile];
  for (int i = 0; i < kN * kN; ++i) host[i] = (float)((i * 7) % 23);
  float *tensor, *out;
  RT(cudaMalloc(&tensor, sizeof host));
  RT(cudaMalloc(&out, sizeof sums));
  RT(cudaMemcpy(tensor, host, sizeof host, cudaMemcpyHostToDevice));
  CUtensorMap map __attribute__((aligned(64)));
  cuuint64_t dims[2] = {kN, kN}, strides[1] = {kN * sizeof(float)};
  cuuint32_t box[2] = {kTile, kTile}, steps[2] = {1, 1};
  CUresult rc = encode(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, tensor, dims, strides, box, steps,
                       CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                       CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (rc != CUDA_SUCCESS) { printf("error encode -> %d\n", (int)rc); return 1; }
  int wrong = 0;
  for (int l = 0; l < launches; ++l) {
    float scale = (float)(l % 5 + 1);
    row_sums<<<kTiles / kTilesPerBlock, 96>>>(map, out, scale);
    RT(cudaMemcpy(sums, out, sizeof sums, cudaMemcpyDeviceToHost));
    for (int tile = 0; tile < kTiles; ++tile) {
      for (int r = 0; r < kTile; ++r) {
        float want = 0;
        for (int c = 0; c < kTile; ++c) want += host[((tile / kTilesPerRow) * kTile + r) * kN + (tile % kTilesPerRow) * kTile + c];
        wrong += sums[tile * kTile + r] != want * scale;
      }
    }
  }
  printf(wrong ? "results wrong: %d\n" : "results correct\n", wrong);
  return wrong != 0;
}
