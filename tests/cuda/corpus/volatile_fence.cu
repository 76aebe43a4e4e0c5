// Covers: volatile loads/stores (ld.volatile), __threadfence (membar.gl / fence.sc.gpu),
// __threadfence_block, a last-block-done pattern with an atomic ticket.

// Each block writes partial[blockIdx.x] = sum of in[block chunk]; the last block to finish
// (atomic ticket on *done, host-zeroed) writes total[0] = sum of all partials.
// Launch: 1-D, blockDim.x == 128, gridDim.x * 128 == n.
extern "C" __global__ void last_block_sum(const float* in, volatile float* partial,
                                          unsigned* done, float* total)
{
    __shared__ float s[128];
    __shared__ bool is_last;
    s[threadIdx.x] = in[blockIdx.x * 128 + threadIdx.x];
    __syncthreads();
    if (threadIdx.x == 0) {
        float acc = 0.0f;
        for (int k = 0; k < 128; ++k) acc += s[k];
        partial[blockIdx.x] = acc;
        __threadfence();
        unsigned ticket = atomicAdd(done, 1u);
        is_last = (ticket == gridDim.x - 1);
    }
    __syncthreads();
    if (is_last && threadIdx.x == 0) {
        float sum = 0.0f;
        for (unsigned b = 0; b < gridDim.x; ++b) sum += partial[b];
        __threadfence_block();
        total[0] = sum;
    }
}
