// The other translation unit of jit_rdc_vadd.cu: a device function it links against.
__device__ float add_pair(float x, float y) { return x + y; }
