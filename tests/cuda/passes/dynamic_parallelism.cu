// Refused by every pass: dynamic parallelism (compile with -rdc=true). The child
// kernel itself is an ordinary kernel and is transformed.

// x[t] += 1 for t < blockDim.x of the child launch.
// Launch: 1-D, one block.
extern "C" __global__ void child(int* x) { x[threadIdx.x] += 1; }

// Thread 0 of each block launches child<<<1, n>>>(x).
// Launch: 1-D, any grid.
extern "C" __global__ void parent(int* x, int n)
{
    if (threadIdx.x == 0) child<<<1, n>>>(x);
}
