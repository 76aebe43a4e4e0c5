// Covers: asm() blocks: nvcc wraps each in a { } scope with local .reg declarations;
// operands in asm, predicates declared inside the block, special registers read via asm.

// out[i] = a[i] + b[i] computed with add.s32 in asm; lane[i] = %laneid; 
// bigger[i] = 1 if a[i] > b[i] else 0 computed with setp/selp in a local-predicate asm block.
// Launch: 1-D, grid*block >= n.
extern "C" __global__ void asm_ops(const int* a, const int* b, int* out, int* lane, int* bigger, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int x = a[i], y = b[i], sum, lid, gt;
    asm volatile("add.s32 %0, %1, %2;" : "=r"(sum) : "r"(x), "r"(y));
    asm volatile("mov.u32 %0, %%laneid;" : "=r"(lid));
    asm volatile("{\n\t"
                 ".reg .pred p;\n\t"
                 "setp.gt.s32 p, %1, %2;\n\t"
                 "selp.s32 %0, 1, 0, p;\n\t"
                 "}" : "=r"(gt) : "r"(x), "r"(y));
    out[i] = sum;
    lane[i] = lid;
    bigger[i] = gt;
}

// clocks[i] = 1 if %clock64 read twice is non-decreasing (always true), smid_ok[i] = 1 if %smid < %nsmid.
// Launch: 1-D, grid*block == number of elements.
extern "C" __global__ void asm_special_regs(int* clocks, int* smid_ok)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned long long c0, c1;
    unsigned smid, nsmid;
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(c0));
    asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
    asm volatile("mov.u32 %0, %%nsmid;" : "=r"(nsmid));
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(c1));
    clocks[i] = c1 >= c0;
    smid_ok[i] = smid < nsmid;
}
