// The device half of rdc_main.cu: defined here, used there, joined by the linker.
__device__ unsigned calls = 0;

__device__ float twice_plus(float x, float y) { return 2.0f * x + y; }
