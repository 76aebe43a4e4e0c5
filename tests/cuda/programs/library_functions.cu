// Device functions archived into a static library for library_kernels.cu; `unused`
// lives in a member of its own, which nothing needs, so the link leaves it out.
extern "C" __device__ int scale(int x) { return 3 * x + 1; }
extern "C" __device__ void record(int* slot, int value) { *slot = value; }
