// Second translation unit of modules_main.cu: its own fatbin, so cudart registers
// (and loads lazily) a second module.
#include <cuda_runtime.h>

__constant__ float weights[4];
__device__ int launches_seen;

struct Affine {
  float scale;
  double shift;
  int repeat;
};

__global__ void apply_weights(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] * weights[i % 4];
  if (i == 0) atomicAdd(&launches_seen, 1);
}

__global__ void affine(float* x, Affine a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    float v = x[i];
    for (int r = 0; r < a.repeat; ++r) v = v * a.scale + (float)a.shift;
    x[i] = v;
  }
}

void launch_second_module(float* x, int n, cudaStream_t stream) {
  apply_weights<<<(n + 63) / 64, 64, 0, stream>>>(x, n);
  affine<<<(n + 63) / 64, 64, 0, stream>>>(x, Affine{2.0f, 1.0, 2}, n);
}

cudaError_t set_weights(const float* w) { return cudaMemcpyToSymbol(weights, w, 4 * sizeof(float)); }

cudaError_t read_launches(int* out) { return cudaMemcpyFromSymbol(out, launches_seen, sizeof(int)); }
