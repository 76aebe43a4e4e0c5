// Device code for linker.c, compiled at test time to relocatable PTX
// (nvcc -ptx -rdc=true): the kernel calls a device function and reads a variable
// that only link_functions.cu defines, so it runs only once the two are linked.
extern "C" __device__ int offset;
extern "C" __device__ int polynomial(int x);

extern "C" __global__ void evaluate(int* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = polynomial(i) + offset;
}
