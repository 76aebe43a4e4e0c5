// CUB's block- and warp-level collectives in kernels of our own, for the sweep
// (tools/ptx_sweep.py).
#include <cub/cub.cuh>

__global__ void block_collectives(const int* in, int* out) {
  using Load = cub::BlockLoad<int, 128, 4, cub::BLOCK_LOAD_TRANSPOSE>;
  using Reduce = cub::BlockReduce<int, 128>;
  using Scan = cub::BlockScan<int, 128>;
  using Sort = cub::BlockRadixSort<int, 128, 4>;
  using Store = cub::BlockStore<int, 128, 4, cub::BLOCK_STORE_WARP_TRANSPOSE>;
  __shared__ union {
    typename Load::TempStorage load;
    typename Reduce::TempStorage reduce;
    typename Scan::TempStorage scan;
    typename Sort::TempStorage sort;
    typename Store::TempStorage store;
  } temp;
  int items[4];
  Load(temp.load).Load(in + blockIdx.x * 512, items);
  __syncthreads();
  int total = Reduce(temp.reduce).Sum(items);
  __syncthreads();
  Scan(temp.scan).ExclusiveSum(items, items);
  __syncthreads();
  Sort(temp.sort).Sort(items);
  __syncthreads();
  Store(temp.store).Store(out + blockIdx.x * 512, items);
  if (threadIdx.x == 0) out[gridDim.x * 512 + blockIdx.x] = total;
}

__global__ void warp_collectives(const float* in, float* out) {
  using Reduce = cub::WarpReduce<float>;
  using Scan = cub::WarpScan<float>;
  __shared__ typename Reduce::TempStorage reduce[4];
  __shared__ typename Scan::TempStorage scan[4];
  int warp = threadIdx.x / 32;
  float v = in[blockIdx.x * blockDim.x + threadIdx.x];
  float sum = Reduce(reduce[warp]).Sum(v);
  float prefix;
  Scan(scan[warp]).InclusiveSum(v, prefix);
  out[blockIdx.x * blockDim.x + threadIdx.x] = prefix + (threadIdx.x % 32 == 0 ? sum : 0.0f);
}
