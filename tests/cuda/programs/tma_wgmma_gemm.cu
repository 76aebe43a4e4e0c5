// A Hopper GEMM tile loop as CUTLASS 3 and FlashAttention-3 build them, written out:
// C (M x N, f32) = A (M x K, f16, row major) * B^T (B: N x K, f16, row major), both
// operands K-major. Each block computes a 128 x 64 tile with three warpgroups:
// warpgroup 0 is the producer (one elected lane loads the A and B tiles of each
// 64-wide k-step with cp.async.bulk.tensor, 128-byte swizzle, into a two-stage ring
// guarded by full/empty mbarriers), warpgroups 1 and 2 are consumers (each waits
// for a stage, multiplies its 64 rows with four wgmma.mma_async m64n64k16 from
// shared-memory descriptors, and frees the stage). setmaxnreg moves registers from
// the producer to the consumers. Prints "gemm correct" when C matches the host's
// product (small integers: exact).   tma_wgmma_gemm [launches [M, a multiple of 128]]
#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>
#include <cuda_fp16.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define RT(call) do { cudaError_t e = (call); if (e != cudaSuccess) { \
  printf("error %s -> %d (%s)\n", #call, (int)e, cudaGetErrorString(e)); return 1; } } while (0)

static const int kN = 128, kK = 256;
static const int kBlockM = 128, kBlockN = 64, kBlockK = 64, kStages = 2;
static const int kTileA = kBlockM * kBlockK * 2, kTileB = kBlockN * kBlockK * 2;   // bytes
static const int kStageBytes = kTileA + kTileB;
static const int kSharedBytes = kStages * kStageBytes + 1024;   // + room to align to 1024

__device__ __forceinline__ unsigned smem(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void wait_parity(uint64_t* bar, unsigned parity) {
  asm volatile("{ .reg .pred p;\nW_%=: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n@!p bra W_%=; }"
               :: "r"(smem(bar)), "r"(parity) : "memory");
}
// A K-major, 128-byte-swizzled operand: rows of 128 bytes, 8-row groups 1024 bytes apart.
__device__ __forceinline__ uint64_t descriptor(unsigned address) {
  return (uint64_t)((address >> 4) & 0x3fff) | (uint64_t)1 << 16 | (uint64_t)(1024 >> 4) << 32 | (uint64_t)1 << 62;
}

__global__ void __launch_bounds__(384) gemm(const __grid_constant__ CUtensorMap map_a,
                                            const __grid_constant__ CUtensorMap map_b, float* c) {
  extern __shared__ uint8_t raw[];
  __shared__ uint64_t full[kStages], empty[kStages];
  uint8_t* tiles = raw + ((1024 - smem(raw) % 1024) % 1024);   // swizzled tiles start on 1024 bytes
  const unsigned warpgroup = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  const int m0 = blockIdx.y * kBlockM, n0 = blockIdx.x * kBlockN, k_steps = kK / kBlockK;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(smem(&full[s])) : "memory");
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 2;" :: "r"(smem(&empty[s])) : "memory");
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (warpgroup == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    if (warp == 0) {
      unsigned elected;
      asm volatile("{ .reg .pred p;\nelect.sync _|p, 0xffffffff;\nselp.u32 %0, 1, 0, p; }" : "=r"(elected));
      for (int k = 0; k < k_steps && elected; ++k) {
        int s = k % kStages;
        if (k >= kStages) wait_parity(&empty[s], ((k / kStages) - 1) & 1);
        uint8_t* a = tiles + s * kStageBytes;
        uint8_t* b = a + kTileA;
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                     :: "r"(smem(&full[s])), "r"((unsigned)kStageBytes) : "memory");
        asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                     " [%0], [%1, {%2, %3}], [%4];"
                     :: "r"(smem(a)), "l"(&map_a), "r"(k * kBlockK), "r"(m0), "r"(smem(&full[s])) : "memory");
        asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                     " [%0], [%1, {%2, %3}], [%4];"
                     :: "r"(smem(b)), "l"(&map_b), "r"(k * kBlockK), "r"(n0), "r"(smem(&full[s])) : "memory");
      }
    }
    return;
  }
  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
  const unsigned consumer = warpgroup - 1;          // rows 64 consumer .. of the block's tile
  float d[32];
  for (int i = 0; i < 32; ++i) d[i] = 0.f;
  for (int k = 0; k < k_steps; ++k) {
    int s = k % kStages;
    wait_parity(&full[s], (k / kStages) & 1);
    unsigned a = smem(tiles + s * kStageBytes) + consumer * 64 * 128;
    unsigned b = smem(tiles + s * kStageBytes + kTileA);
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    for (int kk = 0; kk < kBlockK / 16; ++kk) {
      uint64_t da = descriptor(a + kk * 32), db = descriptor(b + kk * 32);
      asm volatile(
          "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
          "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
          "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, 1, 1, 1, 0, 0;"
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
            "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
            "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
            "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
          : "l"(da), "l"(db) : "memory");
    }
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    __syncwarp();
    if (warp == 0 && lane == 0) asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(smem(&empty[s])) : "memory");
  }
  // D element i of this thread: row 16 warp + lane/4 + 8 ((i % 4) / 2), column 8 (i / 4) + 2 (lane % 4) + i % 2
  for (int i = 0; i < 32; ++i) {
    int row = m0 + consumer * 64 + 16 * warp + lane / 4 + 8 * ((i % 4) / 2);
    int col = n0 + 8 * (i / 4) + 2 * (lane % 4) + i % 2;
    c[row * kN + col] = d[i];
  }
}

static CUresult encode(PFN_cuTensorMapEncodeTiled_v12000 fn, CUtensorMap* map, void* base, int rows, int box_rows) {
  cuuint64_t dims[2] = {kK, (cuuint64_t)rows}, strides[1] = {kK * sizeof(__half)};
  cuuint32_t box[2] = {kBlockK, (cuuint32_t)box_rows}, steps[2] = {1, 1};
  return fn(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, base, dims, strides, box, steps, CU_TENSOR_MAP_INTERLEAVE_NONE,
            CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

int main(int argc, char** argv) {
  int launches = argc > 1 ? atoi(argv[1]) : 1;
  int M = argc > 2 ? atoi(argv[2]) : 256;
  if (M <= 0 || M % kBlockM) { printf("M must be a positive multiple of %d\n", kBlockM); return 2; }
  PFN_cuTensorMapEncodeTiled_v12000 encode_tiled;
  cudaDriverEntryPointQueryResult found;
  RT(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", (void**)&encode_tiled, 12000, cudaEnableDefault, &found));
  __half* a = (__half*)malloc(sizeof(__half) * M * kK);
  __half* b = (__half*)malloc(sizeof(__half) * kN * kK);
  float* c = (float*)malloc(sizeof(float) * M * kN);
  float* want = (float*)malloc(sizeof(float) * M * kN);
  const size_t bytes_a = sizeof(__half) * M * kK, bytes_b = sizeof(__half) * kN * kK, bytes_c = sizeof(float) * M * kN;
  for (int i = 0; i < M * kK; ++i) a[i] = __float2half((float)((i * 7 + i / kK) % 9 - 4));
  for (int i = 0; i < kN * kK; ++i) b[i] = __float2half((float)((i * 5 + i / kK * 3) % 7 - 3));
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < kN; ++n) {
      float sum = 0;
      for (int k = 0; k < kK; ++k) sum += __half2float(a[m * kK + k]) * __half2float(b[n * kK + k]);
      want[m * kN + n] = sum;
    }
  __half *da, *db;
  float* dc;
  RT(cudaMalloc(&da, bytes_a));
  RT(cudaMalloc(&db, bytes_b));
  RT(cudaMalloc(&dc, bytes_c));
  RT(cudaMemcpy(da, a, bytes_a, cudaMemcpyHostToDevice));
  RT(cudaMemcpy(db, b, bytes_b, cudaMemcpyHostToDevice));
  CUtensorMap map_a __attribute__((aligned(64))), map_b __attribute__((aligned(64)));
  CUresult rc = encode(encode_tiled, &map_a, da, M, kBlockM);
  if (rc == CUDA_SUCCESS) rc = encode(encode_tiled, &map_b, db, kN, kBlockN);
  if (rc != CUDA_SUCCESS) { printf("error encode -> %d\n", (int)rc); return 1; }
  RT(cudaFuncSetAttribute(gemm, cudaFuncAttributeMaxDynamicSharedMemorySize, kSharedBytes));
  int wrong = 0;
  for (int l = 0; l < launches; ++l) {
    RT(cudaMemset(dc, 0, bytes_c));
    gemm<<<dim3(kN / kBlockN, M / kBlockM), 384, kSharedBytes>>>(map_a, map_b, dc);
    RT(cudaGetLastError());
    RT(cudaMemcpy(c, dc, bytes_c, cudaMemcpyDeviceToHost));
    for (int i = 0; i < M * kN; ++i) {
      if (c[i] != want[i] && wrong++ < 3) printf("C[%d][%d] = %g, want %g\n", i / kN, i % kN, c[i], want[i]);
    }
  }
  printf(wrong ? "gemm wrong: %d\n" : "gemm correct\n", wrong);
  return wrong != 0;
}
