// Covers: 2-D and 3-D grids and blocks: %ctaid.y/.z, %nctaid.y/.z, %ntid.y/.z, %tid.y/.z.

// out[y * width + x] = y * 1000 + x for x < width, y < height (a 2-D coordinate stamp).
// Launch: 2-D block and grid covering (width, height).
extern "C" __global__ void stamp_2d(int* out, int width, int height)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < width && y < height) out[y * width + x] = y * 1000 + x;
}

// Every thread of a 3-D launch writes its linear block index and the grid's block count:
// with b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z) and
// t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z),
// block_id[b * threads + t] = b and grid_blocks[b * threads + t] = gridDim.x*gridDim.y*gridDim.z,
// where threads = blockDim.x * blockDim.y * blockDim.z.
// Launch: any 3-D grid and block.
extern "C" __global__ void block_ids_3d(int* block_id, int* grid_blocks)
{
    int b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    int threads = blockDim.x * blockDim.y * blockDim.z;
    int t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    block_id[b * threads + t] = b;
    grid_blocks[b * threads + t] = gridDim.x * gridDim.y * gridDim.z;
}
