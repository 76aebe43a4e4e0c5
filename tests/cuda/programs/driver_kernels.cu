// Kernels for driver_api.c, compiled at test time to PTX text and to a fatbin
// (extern "C": the driver API names kernels and globals without C++ mangling).
extern "C" __device__ float bias;

extern "C" __global__ void scale(float* x, float factor, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] * factor + bias;
}

struct Mixed {
  char c;
  double d;
  int i;
};

// Parameters with padding between them: the client must lay them out as the
// server's layout says (offsets 0, 8, 32, 40).
extern "C" __global__ void mixed(char tag, Mixed m, int* out, short s) {
  if (threadIdx.x == 0 && blockIdx.x == 0) {
    out[0] = tag;
    out[1] = m.c;
    out[2] = (int)m.d;
    out[3] = m.i;
    out[4] = s;
  }
}

extern "C" __global__ void iota(int* out, int n, int start) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = start + i;
}
