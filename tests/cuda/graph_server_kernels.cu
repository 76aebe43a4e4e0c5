// Kernels for tests/test_graph_server.py: graphs the server keeps, whose replay
// order shows in the result (affine and combine do not commute).
extern "C" __global__ void affine(int* x, int a, int b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] * a + b;
}

// out[i] += p[i] + q[i]
extern "C" __global__ void combine(int* out, const int* p, const int* q, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] += p[i] + q[i];
}
