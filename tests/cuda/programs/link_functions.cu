// The definitions link_kernels.cu uses (see linker.c). `square` has internal
// linkage, as its namesake in other inputs may too.
extern "C" __device__ int offset = 7;

static __device__ __noinline__ int square(int x) { return x * x; }

extern "C" __device__ __noinline__ int polynomial(int x) { return 3 * square(x) + 2 * x + 1; }
