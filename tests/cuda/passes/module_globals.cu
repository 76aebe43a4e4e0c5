// Module variables of every kind the relocation pass moves (ptx_passes/passes/
// relocate_globals.py): __device__ scalars and arrays, with and without
// initializers, one whose initializer is another variable's address, __constant__
// arrays read with constant and computed indices, a device function that reads them,
// atomics on them, and their addresses taken as values.

__device__ int hits;                                        // zero at load
__device__ float table[8] = {1.f, 2.f, 3.f, 4.f, 5.f, 6.f, 7.f, 8.f};
__device__ float *third = &table[2];                        // generic(table)+8 at load
__device__ unsigned long long wide[2] = {0x0123456789abcdefULL, 42ULL};
__constant__ float coef[4] = {0.5f, 1.5f, -2.0f, 4.0f};
__constant__ int step[3] = {1, 2, 3};

__device__ __noinline__ float scaled(int i) { return table[i & 7] * coef[i & 3]; }

extern "C" __global__ void use_globals(const float *in, float *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  out[i] = in[i] * coef[i % 4] + scaled(i) + *third + (float)step[i % 3] + coef[1];
  atomicAdd(&hits, 1);
}

// The variables' addresses as values (compared with what the loader reports) and a
// write through one of them.
extern "C" __global__ void addresses(unsigned long long *out) {
  out[0] = (unsigned long long)&hits;
  out[1] = (unsigned long long)&table[3];
  out[2] = (unsigned long long)third;
  out[3] = (unsigned long long)&coef[1];
  out[4] = wide[0] + wide[1];
  wide[1] += 1;
  *third += 100.f;
}

// Constant data read through a pointer the host passes (cudaGetSymbolAddress).
extern "C" __global__ void read_through(const float *p, float *out) { out[threadIdx.x] = p[threadIdx.x]; }
