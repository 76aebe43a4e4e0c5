// SIMD video instructions: CUDA's per-byte intrinsics that compile to vabsdiff4
// (__vabsdiffu4, __vsadu4, __vabsdiffs4, __vsads4) and the other vop4/vop2/vset forms
// through inline PTX, each checked on the CPU against the definition (the CUDA math
// API's for the intrinsics, the PTX ISA's pseudocode for the rest). Prints
// `<name>_good=N of N`.
#include <cstdio>
#include <cstdint>
#include <cstdlib>

constexpr int N = 512, OPS = 12;

__device__ unsigned asm_vadd4_sat(unsigned a, unsigned b, unsigned c) {
  unsigned d;
  asm("vadd4.u32.u32.u32.sat %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}
__device__ unsigned asm_vsub4_s(unsigned a, unsigned b, unsigned c) {
  unsigned d;
  asm("vsub4.s32.s32.s32.sat %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}
__device__ unsigned asm_vavrg4(unsigned a, unsigned b, unsigned c) {
  unsigned d;
  asm("vavrg4.u32.u32.u32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}
__device__ unsigned asm_vmin4_s(unsigned a, unsigned b, unsigned c) {
  unsigned d;
  asm("vmin4.s32.s32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}
__device__ unsigned asm_vmax2_add(unsigned a, unsigned b, unsigned c) {
  unsigned d;
  asm("vmax2.u32.u32.u32.add %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}
__device__ unsigned asm_vset4_lt(unsigned a, unsigned b, unsigned c) {
  unsigned d;
  asm("vset4.u32.u32.lt %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}
__device__ unsigned asm_vadd2_s_add(unsigned a, unsigned b, unsigned c) {
  unsigned d;
  asm("vadd2.s32.s32.s32.add %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}
__device__ unsigned asm_vabsdiff2(unsigned a, unsigned b, unsigned c) {
  unsigned d;
  asm("vabsdiff2.u32.u32.u32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

__global__ void run(const unsigned* a, const unsigned* b, const unsigned* c, unsigned* out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= N) return;
  unsigned x = a[i], y = b[i], z = c[i];
  unsigned* o = out + i * OPS;
  o[0] = __vabsdiffu4(x, y);
  o[1] = __vsadu4(x, y);
  o[2] = __vabsdiffs4(x, y);
  o[3] = __vsads4(x, y);
  o[4] = asm_vadd4_sat(x, y, z);
  o[5] = asm_vsub4_s(x, y, z);
  o[6] = asm_vavrg4(x, y, z);
  o[7] = asm_vmin4_s(x, y, z);
  o[8] = asm_vmax2_add(x, y, z);
  o[9] = asm_vset4_lt(x, y, z);
  o[10] = asm_vadd2_s_add(x, y, z);
  o[11] = asm_vabsdiff2(x, y, z);
}

static int64_t lane(unsigned w, int i, int bits, bool s) {
  unsigned v = (w >> (i * bits)) & ((1u << bits) - 1);
  if (s && (v >> (bits - 1))) return (int64_t)v - (int64_t(1) << bits);
  return v;
}
static int64_t clamp(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

template <class F>
static unsigned lanes(unsigned a, unsigned b, int bits, bool s, F f) {
  unsigned out = 0;
  for (int i = 0; i < 32 / bits; ++i)
    out |= (unsigned(f(lane(a, i, bits, s), lane(b, i, bits, s))) & ((1u << bits) - 1)) << (i * bits);
  return out;
}
template <class F>
static unsigned sum(unsigned a, unsigned b, unsigned c, int bits, bool s, F f) {
  int64_t t = c;
  for (int i = 0; i < 32 / bits; ++i) t += f(lane(a, i, bits, s), lane(b, i, bits, s));
  return unsigned(t);
}

static unsigned reference(int op, unsigned a, unsigned b, unsigned c) {
  auto absdiff = [](int64_t x, int64_t y) { return x > y ? x - y : y - x; };
  switch (op) {
    case 0: return lanes(a, b, 8, false, absdiff);
    case 1: return sum(a, b, 0, 8, false, absdiff);
    case 2: return lanes(a, b, 8, true, absdiff);
    case 3: return sum(a, b, 0, 8, true, absdiff);
    case 4: return lanes(a, b, 8, false, [](int64_t x, int64_t y) { return clamp(x + y, 0, 255); });
    case 5: return lanes(a, b, 8, true, [](int64_t x, int64_t y) { return clamp(x - y, -128, 127); });
    case 6: return lanes(a, b, 8, false, [](int64_t x, int64_t y) { return (x + y + 1) >> 1; });
    case 7: return lanes(a, b, 8, true, [](int64_t x, int64_t y) { return x < y ? x : y; });
    case 8: return sum(a, b, c, 16, false, [](int64_t x, int64_t y) { return x > y ? x : y; });
    case 9: return lanes(a, b, 8, false, [](int64_t x, int64_t y) { return int64_t(x < y); });
    case 10: return sum(a, b, c, 16, true, [](int64_t x, int64_t y) { return x + y; });
    default: return lanes(a, b, 16, false, absdiff);
  }
}

int main() {
  static const char* names[OPS] = {"vabsdiffu4", "vsadu4", "vabsdiffs4", "vsads4", "vadd4_sat", "vsub4_s_sat",
                                   "vavrg4", "vmin4_s", "vmax2_add", "vset4_lt", "vadd2_s_add", "vabsdiff2"};
  unsigned ha[N], hb[N], hc[N], hout[N * OPS];
  srand(7);
  for (int i = 0; i < N; ++i) {
    ha[i] = (unsigned(rand()) << 16) ^ unsigned(rand());
    hb[i] = (unsigned(rand()) << 16) ^ unsigned(rand());
    hc[i] = (unsigned(rand()) << 16) ^ unsigned(rand());
  }
  ha[0] = 0xff7f8000u, hb[0] = 0x0080ff7fu;      // the lanes' extremes
  unsigned *a, *b, *c, *out;
  cudaMalloc(&a, sizeof ha);
  cudaMalloc(&b, sizeof hb);
  cudaMalloc(&c, sizeof hc);
  cudaMalloc(&out, sizeof hout);
  cudaMemcpy(a, ha, sizeof ha, cudaMemcpyHostToDevice);
  cudaMemcpy(b, hb, sizeof hb, cudaMemcpyHostToDevice);
  cudaMemcpy(c, hc, sizeof hc, cudaMemcpyHostToDevice);
  run<<<N / 128, 128>>>(a, b, c, out);
  cudaError_t e = cudaMemcpy(hout, out, sizeof hout, cudaMemcpyDeviceToHost);
  if (e != cudaSuccess) {
    std::printf("error=%s\n", cudaGetErrorName(e));
    return 1;
  }
  for (int op = 0; op < OPS; ++op) {
    int good = 0;
    for (int i = 0; i < N; ++i) good += hout[i * OPS + op] == reference(op, ha[i], hb[i], hc[i]);
    std::printf("%s_good=%d of %d\n", names[op], good, N);
  }
  return 0;
}
