// Covers: shfl.sync down/xor/idx/up, vote.sync ballot/any/all, %laneid via threadIdx.

// Per warp (32 consecutive threads, full warps only):
//   sums[w]     = sum of in[32w : 32w+32]            (shfl down reduction)
//   xor_max[w]  = max of in[32w : 32w+32]            (butterfly with shfl xor)
//   bcast[i]    = in[32w + 5]                        (shfl idx from lane 5)
//   prefix[i]   = inclusive prefix sum within the warp (shfl up)
// Launch: 1-D, blockDim.x a multiple of 32, grid*block == number of elements.
extern "C" __global__ void warp_reduce(const float* in, float* sums, float* xor_max,
                                       float* bcast, float* prefix)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int lane = threadIdx.x & 31;
    int warp = i >> 5;
    float v = in[i];

    float s = v;
    for (int off = 16; off > 0; off >>= 1) s += __shfl_down_sync(0xffffffffu, s, off);
    if (lane == 0) sums[warp] = s;

    float m = v;
    for (int mask = 16; mask > 0; mask >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, mask));
    if (lane == 0) xor_max[warp] = m;

    bcast[i] = __shfl_sync(0xffffffffu, v, 5);

    float p = v;
    for (int off = 1; off < 32; off <<= 1) {
        float up = __shfl_up_sync(0xffffffffu, p, off);
        if (lane >= off) p += up;
    }
    prefix[i] = p;
}

// Per warp w: ballot[w] = bitmask of lanes with x[i] > 0; any_pos[w] / all_pos[w] = 1 or 0.
// Launch: 1-D, blockDim.x a multiple of 32, grid*block == number of elements.
extern "C" __global__ void warp_vote(const int* x, unsigned* ballot, int* any_pos, int* all_pos)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int warp = i >> 5;
    bool positive = x[i] > 0;
    unsigned mask = __ballot_sync(0xffffffffu, positive);
    int any = __any_sync(0xffffffffu, positive);
    int all = __all_sync(0xffffffffu, positive);
    if ((threadIdx.x & 31) == 0) {
        ballot[warp] = mask;
        any_pos[warp] = any;
        all_pos[warp] = all;
    }
}
