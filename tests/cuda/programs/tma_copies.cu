// TMA tensor copies as CUTLASS-style code does them: the host encodes tensor maps
// with cuTensorMapEncodeTiled (reached through cudaGetDriverEntryPoint, as CUTLASS
// reaches it), kernels take them as __grid_constant__ parameters and copy boxes
// with cp.async.bulk.tensor completing on an mbarrier.
//   load <swizzle> <box_cols> <box_rows> <x> <y>   one box of the 40 x 48 float
//        tensor t[r][c] = r * 1000 + c into shared memory (1024-aligned); prints the
//        shared bytes in physical order as floats: values=v0,v1,...
//   store <x> <y>   shared memory filled with 1000000 + i (box 16 x 8, no swizzle)
//        stored at (x, y) into a tensor of -1s; prints the tensor: values=...
//   bad             encodings the driver refuses: prints misaligned=<rc> box=<rc>
//                   rank=<rc>, then encodes a good one: good=<rc>
#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RT(call) do { cudaError_t e = (call); if (e != cudaSuccess) { \
  printf("error %s -> %d\n", #call, (int)e); return 1; } } while (0)

static const int kRows = 40, kCols = 48;

__device__ __forceinline__ unsigned smem(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

__global__ void load_box(const __grid_constant__ CUtensorMap map, int x, int y, float* out, int floats) {
  __shared__ alignas(1024) float box[2048];
  __shared__ uint64_t bar;
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(smem(&bar)) : "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(smem(&bar)), "r"(floats * 4) : "memory");
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
                 :: "r"(smem(box)), "l"(&map), "r"(x), "r"(y), "r"(smem(&bar)) : "memory");
  }
  __syncthreads();
  asm volatile("{ .reg .pred p;\nW_%=: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], 0;\n@!p bra W_%=; }"
               :: "r"(smem(&bar)) : "memory");
  for (int i = threadIdx.x; i < floats; i += blockDim.x) out[i] = box[i];
}

__global__ void store_box(const __grid_constant__ CUtensorMap map, int x, int y) {
  __shared__ alignas(128) float box[128];
  for (int i = threadIdx.x; i < 128; i += blockDim.x) box[i] = 1000000.0f + i;
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%0, {%1, %2}], [%3];"
                 :: "l"(&map), "r"(x), "r"(y), "r"(smem(box)) : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
  }
}

// cp.reduce.async.bulk.tensor: adds the box (value 1000000 + i) into the tensor, then
// takes the max with 2,000,000 + i on the first row only (a second map of one row).
__global__ void reduce_box(const __grid_constant__ CUtensorMap map, const __grid_constant__ CUtensorMap row, int x,
                           int y) {
  __shared__ alignas(128) float box[128];
  for (int i = threadIdx.x; i < 128; i += blockDim.x) box[i] = 1000000.0f + i;
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group [%0, {%1, %2}], [%3];"
                 :: "l"(&map), "r"(x), "r"(y), "r"(smem(box)) : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
  }
  __syncthreads();
  for (int i = threadIdx.x; i < 16; i += blockDim.x) box[i] = 2000000.0f + i;
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("cp.reduce.async.bulk.tensor.2d.global.shared::cta.max.bulk_group [%0, {%1, %2}], [%3];"
                 :: "l"(&row), "r"(x), "r"(y), "r"(smem(box)) : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
  }
}

static PFN_cuTensorMapEncodeTiled_v12000 encode_tiled;

static CUresult encode(CUtensorMap* map, void* base, int swizzle, unsigned box_cols, unsigned box_rows) {
  cuuint64_t dims[2] = {kCols, kRows};
  cuuint64_t strides[1] = {kCols * sizeof(float)};
  cuuint32_t box[2] = {box_cols, box_rows};
  cuuint32_t steps[2] = {1, 1};
  return encode_tiled(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, base, dims, strides, box, steps,
                      CU_TENSOR_MAP_INTERLEAVE_NONE, (CUtensorMapSwizzle)swizzle, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

static void print_floats(const float* v, int n) {
  printf("values=");
  for (int i = 0; i < n; ++i) printf(i ? ",%.0f" : "%.0f", v[i]);
  printf("\n");
}

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  cudaDriverEntryPointQueryResult found;
  RT(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", (void**)&encode_tiled, 12000, cudaEnableDefault, &found));
  if (found != cudaDriverEntryPointSuccess) { printf("error no cuTensorMapEncodeTiled\n"); return 1; }
  float host[kRows * kCols];
  for (int r = 0; r < kRows; ++r) for (int c = 0; c < kCols; ++c) host[r * kCols + c] = r * 1000.0f + c;
  float* tensor;
  RT(cudaMalloc(&tensor, sizeof host));
  RT(cudaMemcpy(tensor, host, sizeof host, cudaMemcpyHostToDevice));
  CUtensorMap map __attribute__((aligned(64)));
  if (!strcmp(argv[1], "load")) {
    int swizzle = atoi(argv[2]), cols = atoi(argv[3]), rows = atoi(argv[4]), x = atoi(argv[5]), y = atoi(argv[6]);
    CUresult rc = encode(&map, tensor, swizzle, cols, rows);
    if (rc != CUDA_SUCCESS) { printf("error encode -> %d\n", (int)rc); return 1; }
    float* out;
    RT(cudaMalloc(&out, cols * rows * sizeof(float)));
    load_box<<<1, 64>>>(map, x, y, out, cols * rows);
    RT(cudaGetLastError());
    float* back = (float*)malloc(cols * rows * sizeof(float));
    RT(cudaMemcpy(back, out, cols * rows * sizeof(float), cudaMemcpyDeviceToHost));
    print_floats(back, cols * rows);
  } else if (!strcmp(argv[1], "store")) {
    int x = atoi(argv[2]), y = atoi(argv[3]);
    for (int i = 0; i < kRows * kCols; ++i) host[i] = -1.0f;
    RT(cudaMemcpy(tensor, host, sizeof host, cudaMemcpyHostToDevice));
    CUresult rc = encode(&map, tensor, CU_TENSOR_MAP_SWIZZLE_NONE, 16, 8);
    if (rc != CUDA_SUCCESS) { printf("error encode -> %d\n", (int)rc); return 1; }
    store_box<<<1, 64>>>(map, x, y);
    RT(cudaGetLastError());
    RT(cudaMemcpy(host, tensor, sizeof host, cudaMemcpyDeviceToHost));
    print_floats(host, kRows * kCols);
  } else if (!strcmp(argv[1], "reduce")) {
    int x = atoi(argv[2]), y = atoi(argv[3]);
    CUtensorMap row __attribute__((aligned(64)));
    CUresult rc = encode(&map, tensor, CU_TENSOR_MAP_SWIZZLE_NONE, 16, 8);
    if (rc == CUDA_SUCCESS) rc = encode(&row, tensor, CU_TENSOR_MAP_SWIZZLE_NONE, 16, 1);
    if (rc != CUDA_SUCCESS) { printf("error encode -> %d\n", (int)rc); return 1; }
    reduce_box<<<1, 64>>>(map, row, x, y);
    RT(cudaGetLastError());
    RT(cudaMemcpy(host, tensor, sizeof host, cudaMemcpyDeviceToHost));
    print_floats(host, kRows * kCols);
  } else {
    printf("misaligned=%d\n", (int)encode(&map, (char*)tensor + 4, 0, 16, 8));
    printf("box=%d\n", (int)encode(&map, tensor, 0, 300, 8));
    printf("swizzle_span=%d\n", (int)encode(&map, tensor, CU_TENSOR_MAP_SWIZZLE_32B, 16, 8));
    cuuint64_t dims[1] = {16};
    cuuint32_t box[1] = {4}, steps[1] = {1};
    printf("rank=%d\n", (int)encode_tiled(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 6, tensor, dims, NULL, box, steps,
                                           CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                                           CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
    printf("good=%d\n", (int)encode(&map, tensor, CU_TENSOR_MAP_SWIZZLE_128B, 32, 8));
  }
  return 0;
}
