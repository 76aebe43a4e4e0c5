// TMA copies in im2col mode and from interleaved tensor maps, as convolution kernels
// (CUTLASS's implicit-GEMM convolutions, Triton's Gluon im2col loads) use them. The
// tensor is a flat float array whose element i holds i; a rank-r map views it as
// dimensions {16 channels, 6 (W), 5 (H), 3 (D)}[:r - 1] + {2 images}, densely.
//   load <rank> <swizzle> <channels> <pixels> <c0> <spatial...> <n> <offsets...>
//        <lower corners...> <upper corners...> <spatial strides...>
//        one im2col column into shared memory (1024-aligned) with
//        cp.async.bulk.tensor.<rank>d...im2col; prints the shared bytes in physical
//        order as floats: values=v0,v1,...
//   store <rank> <add> <channels> <pixels> <c0> <spatial...> <n> <lower...> <upper...>
//        shared memory holding 100000 + i written (add 0) or added (add 1) with
//        .im2col_no_offs into the tensor (first set to -1 for a store); prints it
//   interleaved <interleave> <swizzle> <box0> <box1> <box2> <x> <y> <z>
//        a tile-mode box of a rank-3 interleaved map over the first 16 * 6 * 5 floats,
//        dimensions {box0 floats per chunk... = 16 / 4 or 32 / 4, 6, 5 * 16 / chunk};
//        prints the shared bytes as floats
//   mismatch      a tile-mode copy with an im2col map (the emulator refuses it)
//   bad           encodings the driver refuses: prints rank=<rc> channels=<rc>
//                 pixels=<rc> corner=<rc>, then a good one: good=<rc>
#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RT(call) do { cudaError_t e = (call); if (e != cudaSuccess) { \
  printf("error %s -> %d\n", #call, (int)e); return 1; } } while (0)

static const unsigned long long kDims[5] = {16, 6, 5, 3, 2};   // C, W, H, D; N is last in every view
static const int kFloats = 16 * 6 * 5 * 3 * 2;

__device__ __forceinline__ unsigned smem(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void wait_parity0(unsigned bar) {
  asm volatile("{ .reg .pred p;\nW_%=: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], 0;\n@!p bra W_%=; }"
               :: "r"(bar) : "memory");
}

struct Column {
  int c[5];          // coordinates, channel first
  short offset[3];   // im2col offsets, W first
};

__global__ void load_column(const __grid_constant__ CUtensorMap map, int rank, Column at, float* out, int floats) {
  __shared__ alignas(1024) float column[4096];
  __shared__ uint64_t bar;
  if (threadIdx.x == 0) {
    unsigned b = smem(&bar), dst = smem(column);
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(b) : "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(b), "r"(floats * 4) : "memory");
    if (rank == 3) {
      asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes"
                   " [%0], [%1, {%2, %3, %4}], [%5], {%6};"
                   :: "r"(dst), "l"(&map), "r"(at.c[0]), "r"(at.c[1]), "r"(at.c[2]), "r"(b), "h"(at.offset[0])
                   : "memory");
    } else if (rank == 4) {
      asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes"
                   " [%0], [%1, {%2, %3, %4, %5}], [%6], {%7, %8};"
                   :: "r"(dst), "l"(&map), "r"(at.c[0]), "r"(at.c[1]), "r"(at.c[2]), "r"(at.c[3]), "r"(b),
                      "h"(at.offset[0]), "h"(at.offset[1]) : "memory");
    } else {
      asm volatile("cp.async.bulk.tensor.5d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes"
                   " [%0], [%1, {%2, %3, %4, %5, %6}], [%7], {%8, %9, %10};"
                   :: "r"(dst), "l"(&map), "r"(at.c[0]), "r"(at.c[1]), "r"(at.c[2]), "r"(at.c[3]), "r"(at.c[4]),
                      "r"(b), "h"(at.offset[0]), "h"(at.offset[1]), "h"(at.offset[2]) : "memory");
    }
  }
  __syncthreads();
  wait_parity0(smem(&bar));
  for (int i = threadIdx.x; i < floats; i += blockDim.x) out[i] = column[i];
}

// Shared memory holding 100000 + i written into the tensor (or added to it) as an
// im2col column without offsets.
__global__ void store_column(const __grid_constant__ CUtensorMap map, int add, Column at, int floats) {
  __shared__ alignas(128) float column[4096];
  for (int i = threadIdx.x; i < floats; i += blockDim.x) column[i] = 100000.0f + i;
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  if (threadIdx.x != 0) return;
  unsigned src = smem(column);
  if (add) {
    asm volatile("cp.reduce.async.bulk.tensor.4d.global.shared::cta.add.im2col_no_offs.bulk_group"
                 " [%0, {%1, %2, %3, %4}], [%5];"
                 :: "l"(&map), "r"(at.c[0]), "r"(at.c[1]), "r"(at.c[2]), "r"(at.c[3]), "r"(src) : "memory");
  } else {
    asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.im2col_no_offs.bulk_group [%0, {%1, %2, %3, %4}], [%5];"
                 :: "l"(&map), "r"(at.c[0]), "r"(at.c[1]), "r"(at.c[2]), "r"(at.c[3]), "r"(src) : "memory");
  }
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

// A tile-mode box of a rank-3 map (the interleaved maps and the mismatch case).
__global__ void load_box3(const __grid_constant__ CUtensorMap map, int x, int y, int z, float* out, int floats) {
  __shared__ alignas(1024) float box[4096];
  __shared__ uint64_t bar;
  if (threadIdx.x == 0) {
    unsigned b = smem(&bar);
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(b) : "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(b), "r"(floats * 4) : "memory");
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4}], [%5];"
                 :: "r"(smem(box)), "l"(&map), "r"(x), "r"(y), "r"(z), "r"(b) : "memory");
  }
  __syncthreads();
  wait_parity0(smem(&bar));
  for (int i = threadIdx.x; i < floats; i += blockDim.x) out[i] = box[i];
}

static PFN_cuTensorMapEncodeIm2col_v12000 encode_im2col;
static PFN_cuTensorMapEncodeTiled_v12000 encode_tiled;

// The rank-r view of the tensor: dims and byte strides.
static void view(int rank, cuuint64_t* dims, cuuint64_t* strides) {
  for (int i = 0; i < rank - 1; ++i) dims[i] = kDims[i];
  dims[rank - 1] = kDims[4];
  cuuint64_t stride = sizeof(float);
  for (int i = 0; i + 1 < rank; ++i) strides[i] = stride *= dims[i];
}

static CUresult encode_column(CUtensorMap* map, void* base, int rank, int swizzle, unsigned channels,
                              unsigned pixels, const int* lower, const int* upper, const unsigned* steps) {
  cuuint64_t dims[5], strides[4];
  view(rank, dims, strides);
  cuuint32_t element_strides[5] = {1, 1, 1, 1, 1};
  for (int s = 0; s + 2 < rank; ++s) element_strides[1 + s] = steps[s];
  return encode_im2col(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, rank, base, dims, strides, lower, upper, channels,
                       pixels, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, (CUtensorMapSwizzle)swizzle,
                       CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

static void print_floats(const float* v, int n) {
  printf("values=");
  for (int i = 0; i < n; ++i) printf(i ? ",%.0f" : "%.0f", v[i]);
  printf("\n");
}

static int print_device(const float* device, int n) {
  float* back = (float*)malloc(n * sizeof(float));
  RT(cudaMemcpy(back, device, n * sizeof(float), cudaMemcpyDeviceToHost));
  print_floats(back, n);
  free(back);
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  cudaDriverEntryPointQueryResult found;
  RT(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeIm2col", (void**)&encode_im2col, 12000, cudaEnableDefault,
                                      &found));
  if (found != cudaDriverEntryPointSuccess) { printf("error no cuTensorMapEncodeIm2col\n"); return 1; }
  RT(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", (void**)&encode_tiled, 12000, cudaEnableDefault,
                                      &found));
  static float host[kFloats];
  for (int i = 0; i < kFloats; ++i) host[i] = (float)i;
  float* tensor;
  RT(cudaMalloc(&tensor, sizeof host));
  RT(cudaMemcpy(tensor, host, sizeof host, cudaMemcpyHostToDevice));
  CUtensorMap map __attribute__((aligned(64)));
  const char* command = argv[1];
  if (!strcmp(command, "load") || !strcmp(command, "store")) {
    bool load = !strcmp(command, "load");
    int a = 2, rank = atoi(argv[a++]), mode = atoi(argv[a++]);   // load: the swizzle; store: add or not
    unsigned channels = atoi(argv[a++]), pixels = atoi(argv[a++]);
    int spatial = rank - 2, lower[3] = {0}, upper[3] = {0};
    unsigned steps[3] = {1, 1, 1};
    Column at = {};
    for (int i = 0; i < rank; ++i) at.c[i] = atoi(argv[a++]);
    if (load) for (int s = 0; s < spatial; ++s) at.offset[s] = (short)atoi(argv[a++]);
    for (int s = 0; s < spatial; ++s) lower[s] = atoi(argv[a++]);
    for (int s = 0; s < spatial; ++s) upper[s] = atoi(argv[a++]);
    if (load) for (int s = 0; s < spatial; ++s) steps[s] = atoi(argv[a++]);
    CUresult rc = encode_column(&map, tensor, rank, load ? mode : 0, channels, pixels, lower, upper, steps);
    if (rc != CUDA_SUCCESS) { printf("error encode -> %d\n", (int)rc); return 1; }
    int floats = channels * pixels;
    if (load) {
      float* out;
      RT(cudaMalloc(&out, floats * sizeof(float)));
      load_column<<<1, 64>>>(map, rank, at, out, floats);
      RT(cudaGetLastError());
      return print_device(out, floats);
    }
    if (!mode) {
      for (int i = 0; i < kFloats; ++i) host[i] = -1.0f;
      RT(cudaMemcpy(tensor, host, sizeof host, cudaMemcpyHostToDevice));
    }
    store_column<<<1, 64>>>(map, mode, at, floats);
    RT(cudaGetLastError());
    return print_device(tensor, kFloats);
  }
  if (!strcmp(command, "interleaved")) {
    int interleave = atoi(argv[2]), swizzle = atoi(argv[3]);
    cuuint32_t box[3] = {(cuuint32_t)atoi(argv[4]), (cuuint32_t)atoi(argv[5]), (cuuint32_t)atoi(argv[6])};
    int x = atoi(argv[7]), y = atoi(argv[8]), z = atoi(argv[9]);
    cuuint64_t chunk = interleave == CU_TENSOR_MAP_INTERLEAVE_16B ? 4 : 8;   // floats per channel chunk
    cuuint64_t dims[3] = {chunk, 6, 16 * 6 * 5 / (chunk * 6)};
    cuuint64_t strides[2] = {chunk * sizeof(float), chunk * 6 * sizeof(float)};
    cuuint32_t steps[3] = {1, 1, 1};
    CUresult rc = encode_tiled(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 3, tensor, dims, strides, box, steps,
                               (CUtensorMapInterleave)interleave, (CUtensorMapSwizzle)swizzle,
                               CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (rc != CUDA_SUCCESS) { printf("error encode -> %d\n", (int)rc); return 1; }
    int floats = box[0] * box[1] * box[2];
    float* out;
    RT(cudaMalloc(&out, floats * sizeof(float)));
    load_box3<<<1, 64>>>(map, x, y, z, out, floats);
    RT(cudaGetLastError());
    return print_device(out, floats);
  }
  if (!strcmp(command, "mismatch")) {
    int corner[1] = {0};
    unsigned steps[1] = {1};
    CUresult rc = encode_column(&map, tensor, 3, 0, 16, 4, corner, corner, steps);
    if (rc != CUDA_SUCCESS) { printf("error encode -> %d\n", (int)rc); return 1; }
    float* out;
    RT(cudaMalloc(&out, 64 * sizeof(float)));
    load_box3<<<1, 64>>>(map, 0, 0, 0, out, 64);
    printf("launch=%d\n", (int)cudaGetLastError());
    printf("sync=%d\n", (int)cudaDeviceSynchronize());
    return 0;
  }
  int zero[3] = {0, 0, 0}, far[2] = {-200, 0};
  unsigned steps[3] = {1, 1, 1};
  cuuint64_t dims[2] = {16, 6}, strides[1] = {64};
  cuuint32_t estrides[2] = {1, 1};
  printf("rank=%d\n", (int)encode_im2col(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, tensor, dims, strides, zero, zero,
                                         16, 4, estrides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                                         CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
  printf("channels=%d\n", (int)encode_column(&map, tensor, 4, 0, 300, 4, zero, zero, steps));
  printf("pixels=%d\n", (int)encode_column(&map, tensor, 4, 0, 16, 2000, zero, zero, steps));
  printf("corner=%d\n", (int)encode_column(&map, tensor, 4, 0, 16, 4, far, zero, steps));
  printf("good=%d\n", (int)encode_column(&map, tensor, 4, 0, 16, 4, zero, zero, steps));
  return 0;
}
