// A member of the test's static library that no kernel needs.
extern "C" __device__ int unused(int x) { return x - 1; }
