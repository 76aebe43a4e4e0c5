// Kernels whose cubin metadata the fatbin/cubin readers are checked against.
// Each one pins down one fact: parameter layout, registers, shared memory,
// stack frame, launch bounds, register caps, barriers, grid-wide sync.
#include <cooperative_groups.h>

struct Mixed { char c; double d; int i; };       // 24 bytes, align 8
struct __align__(16) Five { float v[5]; };       // 32 bytes, align 16

// DESIGN.md's layout kernel: offsets 0/8/32/48/64/96/104, sizes 1/24/16/2/32/8/1, total 105.
__global__ void kp(char a, Mixed s, float4 f, short h, Five arr, const int* p, bool b) {
  if (threadIdx.x == 0 && p) ((int*)p)[0] = a + (int)s.d + s.i + (int)f.x + h + (int)arr.v[4] + b;
}

__global__ void static_shared(float* out, int n) {
  __shared__ float tile[256];
  int t = threadIdx.x;
  tile[t] = t * 2.0f;
  __syncthreads();
  if (t < n) out[t] = tile[255 - t];
}

__global__ void __launch_bounds__(128) bounded(float* x) { x[threadIdx.x] += 1.0f; }

__global__ void __launch_bounds__(256, 2) bounded_min_blocks(float* x) { x[threadIdx.x] *= 2.0f; }

// Enough live values that ptxas needs many registers; __maxnreg__ then caps them.
#define MANY_ACCUMULATORS(NAME, ATTR)                                             \
  __global__ void ATTR NAME(const float* __restrict__ a, float* out, int n) {    \
    float acc[48];                                                               \
    _Pragma("unroll") for (int k = 0; k < 48; ++k) acc[k] = a[threadIdx.x * 48 + k]; \
    for (int i = 0; i < n; ++i) {                                                \
      _Pragma("unroll") for (int k = 0; k < 48; ++k)                             \
        acc[k] = acc[k] * acc[(k + 7) % 48] + a[i * 48 + k];                     \
    }                                                                            \
    float s = 0;                                                                 \
    _Pragma("unroll") for (int k = 0; k < 48; ++k) s += acc[k];                  \
    out[threadIdx.x] = s;                                                        \
  }
MANY_ACCUMULATORS(many_registers, )
MANY_ACCUMULATORS(capped_registers, __maxnreg__(32))

// A local array written and read at run-time indices cannot live in registers: it is on the stack.
__global__ void stack_frame(const int* idx, float* out) {
  float local[64];
  for (int k = 0; k < 64; ++k) local[k] = out[k];
  local[idx[threadIdx.x] & 63] += 1.0f;
  out[threadIdx.x] = local[idx[threadIdx.x + 1] & 63];
}

__global__ void grid_sync(int* x) {
  x[blockIdx.x] = 1;
  cooperative_groups::this_grid().sync();
  x[0] += x[gridDim.x - 1];
}

__global__ void no_params() {}

int main() {
  kp<<<1, 1>>>(0, Mixed{}, float4{}, 0, Five{}, nullptr, false);
  return 0;
}
