// Several modules and kernels through the CUDA runtime: kernels in two translation
// units (two fatbins), a template kernel, a shared-memory reduction, constant and
// global device variables (cudaMemcpyToSymbol/FromSymbol), cudaMemset, pitched
// memory with 2-D copies, and async copies on the default stream. Each result is
// checked on the host; key=value lines say what matched.
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#include "runtime_check.h"

void launch_second_module(float* x, int n, cudaStream_t stream);
cudaError_t set_weights(const float* w);
cudaError_t read_launches(int* out);

template <typename T>
__global__ void axpy(T a, const T* x, T* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

__global__ void block_sums(const int* x, int* sums, int n) {
  __shared__ int partial[128];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  partial[threadIdx.x] = i < n ? x[i] : 0;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) sums[blockIdx.x] = partial[0];
}

__global__ void mark_rows(int* base, size_t pitch, int width, int height) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
  if (x < width && y < height) {
    int* row = (int*)((char*)base + y * pitch);
    row[x] += 1000 * y;
  }
}

int main() {
  const int n = 1000;
  // 1. template kernel, float and double
  float xf[n], yf[n];
  double xd[n], yd[n];
  for (int i = 0; i < n; ++i) xf[i] = i, yf[i] = 1, xd[i] = 0.5 * i, yd[i] = 2;
  float *dxf, *dyf;
  double *dxd, *dyd;
  CHECK(cudaMalloc(&dxf, sizeof xf));
  CHECK(cudaMalloc(&dyf, sizeof yf));
  CHECK(cudaMalloc(&dxd, sizeof xd));
  CHECK(cudaMalloc(&dyd, sizeof yd));
  CHECK(cudaMemcpyAsync(dxf, xf, sizeof xf, cudaMemcpyHostToDevice, 0));
  CHECK(cudaMemcpyAsync(dyf, yf, sizeof yf, cudaMemcpyHostToDevice, 0));
  CHECK(cudaMemcpy(dxd, xd, sizeof xd, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dyd, yd, sizeof yd, cudaMemcpyHostToDevice));
  axpy<float><<<(n + 127) / 128, 128>>>(3.0f, dxf, dyf, n);
  axpy<double><<<(n + 127) / 128, 128>>>(-2.0, dxd, dyd, n);
  CHECK(cudaMemcpy(yf, dyf, sizeof yf, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(yd, dyd, sizeof yd, cudaMemcpyDeviceToHost));
  int good_f = 0, good_d = 0;
  for (int i = 0; i < n; ++i) good_f += yf[i] == 3.0f * i + 1, good_d += yd[i] == -1.0 * i + 2;
  printf("axpy_float=%d axpy_double=%d\n", good_f, good_d);

  // 2. shared-memory reduction
  int xi[n];
  long long expect = 0;
  for (int i = 0; i < n; ++i) xi[i] = i % 37, expect += i % 37;
  int *dxi, *dsums;
  const int blocks = (n + 127) / 128;
  CHECK(cudaMalloc(&dxi, sizeof xi));
  CHECK(cudaMalloc(&dsums, blocks * sizeof(int)));
  CHECK(cudaMemset(dsums, 0xff, blocks * sizeof(int)));
  CHECK(cudaMemcpy(dxi, xi, sizeof xi, cudaMemcpyHostToDevice));
  block_sums<<<blocks, 128>>>(dxi, dsums, n);
  int sums[blocks];
  CHECK(cudaMemcpy(sums, dsums, sizeof sums, cudaMemcpyDeviceToHost));
  long long total = 0;
  for (int b = 0; b < blocks; ++b) total += sums[b];
  printf("reduce=%lld expect=%lld\n", total, expect);

  // 3. second module: constant weights, struct parameter, device global
  const float w[4] = {1.0f, 0.5f, 2.0f, -1.0f};
  CHECK(set_weights(w));
  float v[n];
  for (int i = 0; i < n; ++i) v[i] = i;
  float* dv;
  CHECK(cudaMalloc(&dv, sizeof v));
  CHECK(cudaMemcpy(dv, v, sizeof v, cudaMemcpyHostToDevice));
  launch_second_module(dv, n, 0);
  launch_second_module(dv, n, 0);
  CHECK(cudaMemcpy(v, dv, sizeof v, cudaMemcpyDeviceToHost));
  int good_module = 0;
  for (int i = 0; i < n; ++i) {
    float e = i;
    for (int round = 0; round < 2; ++round) {
      e = e * w[i % 4];
      for (int r = 0; r < 2; ++r) e = e * 2.0f + 1.0f;
    }
    good_module += v[i] == e;
  }
  int launches = -1;
  CHECK(read_launches(&launches));
  printf("second_module=%d launches_seen=%d\n", good_module, launches);

  // 4. pitched memory, 2-D copies and a 2-D grid
  const int width = 37, height = 6;
  int* dp;
  size_t pitch;
  CHECK(cudaMallocPitch((void**)&dp, &pitch, width * sizeof(int), height));
  int grid_host[height][width];
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x) grid_host[y][x] = x;
  CHECK(cudaMemcpy2D(dp, pitch, grid_host, sizeof grid_host[0], width * sizeof(int), height, cudaMemcpyHostToDevice));
  mark_rows<<<dim3(1, height), 64>>>(dp, pitch, width, height);
  CHECK(cudaMemcpy2D(grid_host, sizeof grid_host[0], dp, pitch, width * sizeof(int), height, cudaMemcpyDeviceToHost));
  int good_2d = 0;
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x) good_2d += grid_host[y][x] == x + 1000 * y;
  printf("pitched=%d of %d\n", good_2d, width * height);

  CHECK(cudaDeviceSynchronize());
  cudaFree(dxf), cudaFree(dyf), cudaFree(dxd), cudaFree(dyd), cudaFree(dxi), cudaFree(dsums), cudaFree(dv), cudaFree(dp);
  printf("done\n");
  return 0;
}
