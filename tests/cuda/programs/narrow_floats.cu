// The 8-bit float conversions, the NaN-propagating min/max and tensormap.replace,
// written as the PTX instructions themselves (inline asm: cuda_fp8.h and cuda_bf16.h
// emit the same ones on sm_89/sm_90). Build with -arch=sm_90a (tensormap.replace); the
// ue8m0 conversions (slots 7-10 and 14) need sm_100a and are 0 on older targets.
//
// Output: `inputs=` the f32 bits of the inputs, then one `slotK=` line per result
// kind, each a comma-separated list of hex values (one per input pair); the test
// computes every expected value from the formats' definitions. `tensormap_global=`
// and `tensormap_shared=` are the 32 words of a 128-byte tensor map after
// tensormap.replace wrote fields of it in global and in shared memory.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "runtime_check.h"

constexpr int kSlots = 16;

__device__ unsigned pack_bf16x2(float hi, float lo) {
  unsigned r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

__global__ void conversions(const float* x, int pairs, unsigned* out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= pairs) return;
  float a = x[2 * i], b = x[2 * i + 1];
  unsigned* o = out + kSlots * i;
  unsigned short s;
  unsigned u;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(s) : "f"(a), "f"(b));
  o[0] = s;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(u) : "h"(s));
  o[4] = u;
  asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(s) : "f"(a), "f"(b));
  o[1] = s;
  asm("cvt.rn.relu.f16x2.e5m2x2 %0, %1;" : "=r"(u) : "h"(s));
  o[5] = u;
  asm("cvt.rn.satfinite.relu.e4m3x2.f32 %0, %1, %2;" : "=h"(s) : "f"(a), "f"(b));
  o[2] = s;
  asm("cvt.rn.satfinite.relu.e5m2x2.f32 %0, %1, %2;" : "=h"(s) : "f"(a), "f"(b));
  o[3] = s;
  unsigned halves;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(halves) : "f"(a), "f"(b));
  asm("cvt.rn.satfinite.e4m3x2.f16x2 %0, %1;" : "=h"(s) : "r"(halves));
  o[6] = s;
#if __CUDA_ARCH__ >= 1000
  asm("cvt.rz.satfinite.ue8m0x2.f32 %0, %1, %2;" : "=h"(s) : "f"(a), "f"(b));
  o[7] = s;
  asm("cvt.rp.satfinite.ue8m0x2.f32 %0, %1, %2;" : "=h"(s) : "f"(a), "f"(b));
  o[8] = s;
  asm("cvt.rp.ue8m0x2.f32 %0, %1, %2;" : "=h"(s) : "f"(a), "f"(b));
  o[9] = s;
  asm("cvt.rn.bf16x2.ue8m0x2 %0, %1;" : "=r"(u) : "h"((unsigned short)o[8]));
  o[10] = u;
  asm("cvt.rz.satfinite.ue8m0x2.bf16x2 %0, %1;" : "=h"(s) : "r"(pack_bf16x2(a, b)));
  o[14] = s;
#else
  o[7] = o[8] = o[9] = o[10] = o[14] = 0;
#endif
  unsigned short ha, hb, r16;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(ha) : "f"(a));
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(hb) : "f"(b));
  asm("max.NaN.bf16 %0, %1, %2;" : "=h"(r16) : "h"(ha), "h"(hb));
  o[11] = r16;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(ha) : "f"(a));
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(hb) : "f"(b));
  asm("min.NaN.f16 %0, %1, %2;" : "=h"(r16) : "h"(ha), "h"(hb));
  o[12] = r16;
  float f;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(f) : "f"(a), "f"(b));
  o[13] = __float_as_uint(f);
  asm("min.NaN.bf16x2 %0, %1, %2;" : "=r"(u) : "r"(pack_bf16x2(a, b)), "r"(pack_bf16x2(b, a)));
  o[15] = u;
}

// Fields of a tensor map replaced in global memory, then in a copy in shared memory.
__device__ void replace_fields_global(void* map) {
  asm volatile("tensormap.replace.tile.global_address.global.b1024.b64 [%0], %1;" ::"l"(map),
               "l"(0x123456789abcdef0ull));
  asm volatile("tensormap.replace.tile.rank.global.b1024.b32 [%0], 2;" ::"l"(map));
  asm volatile("tensormap.replace.tile.box_dim.global.b1024.b32 [%0], 1, %1;" ::"l"(map), "r"(64));
  asm volatile("tensormap.replace.tile.global_dim.global.b1024.b32 [%0], 4, %1;" ::"l"(map), "r"(777));
  asm volatile("tensormap.replace.tile.global_stride.global.b1024.b64 [%0], 0, %1;" ::"l"(map),
               "l"(4096ull));
  asm volatile("tensormap.replace.tile.element_stride.global.b1024.b32 [%0], 2, %1;" ::"l"(map), "r"(3));
  asm volatile("tensormap.replace.tile.elemtype.global.b1024.b32 [%0], 7;" ::"l"(map));
  asm volatile("tensormap.replace.tile.swizzle_mode.global.b1024.b32 [%0], 3;" ::"l"(map));
  asm volatile("tensormap.replace.tile.fill_mode.global.b1024.b32 [%0], 1;" ::"l"(map));
}

__global__ void tensor_maps(unsigned* global_map, unsigned* shared_out) {
  __shared__ alignas(128) unsigned map[32];
  replace_fields_global(global_map);
  for (int k = 0; k < 32; ++k) map[k] = 0;
  unsigned at = static_cast<unsigned>(__cvta_generic_to_shared(map));
  asm volatile("tensormap.replace.tile.rank.shared::cta.b1024.b32 [%0], 4;" ::"r"(at));
  asm volatile("tensormap.replace.tile.global_address.shared::cta.b1024.b64 [%0], %1;" ::"r"(at),
               "l"(0xfeedull));
  asm volatile("tensormap.replace.tile.interleave_layout.shared::cta.b1024.b32 [%0], 2;" ::"r"(at));
  asm volatile("tensormap.replace.tile.fill_mode.shared::cta.b1024.b32 [%0], 1;" ::"r"(at));
  for (int k = 0; k < 32; ++k) shared_out[k] = map[k];
}

void print_words(const char* key, const std::vector<unsigned>& v, size_t start, size_t stride, size_t count) {
  printf("%s=", key);
  for (size_t k = 0; k < count; ++k) printf(k ? ",%x" : "%x", v[start + k * stride]);
  printf("\n");
}

int main() {
  // Specials, both signs, ties, the formats' limits and their neighbours, subnormals, a sweep.
  std::vector<float> x = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 1.0f, -1.0f, 448.0f, 449.0f,
                          464.0f, 480.0f, -500.0f, 57344.0f, 61439.0f, 61440.0f, 1e30f, -1e30f, 1e-30f, -1e-30f,
                          0.001953125f, 0.0009765625f, 0.0029296875f, 1.0625f, 1.1875f, 1.125f, 3.5f, 0.3f,
                          6.103515625e-05f, 1.52587890625e-05f, 2.2e-38f, 1.17549435e-38f, 5.9e-39f, 1e-45f};
  for (int k = -200; k < 200; ++k) x.push_back(std::ldexp(1.0f + 0.0371f * (k & 31), k / 8) * (k % 3 ? 1 : -1));
  if (x.size() % 2) x.push_back(2.0f);
  const int pairs = static_cast<int>(x.size() / 2);
  float* d_x;
  unsigned *d_out, *d_map, *d_shared;
  CHECK(cudaMalloc(&d_x, x.size() * sizeof(float)));
  CHECK(cudaMalloc(&d_out, pairs * kSlots * sizeof(unsigned)));
  CHECK(cudaMalloc(&d_map, 128));
  CHECK(cudaMalloc(&d_shared, 128));
  CHECK(cudaMemset(d_map, 0, 128));
  CHECK(cudaMemcpy(d_x, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice));
  conversions<<<(pairs + 63) / 64, 64>>>(d_x, pairs, d_out);
  tensor_maps<<<1, 1>>>(d_map, d_shared);
  CHECK(cudaDeviceSynchronize());
  std::vector<unsigned> out(pairs * kSlots), map(32), shared(32), bits(x.size());
  CHECK(cudaMemcpy(out.data(), d_out, out.size() * sizeof(unsigned), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(map.data(), d_map, 128, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(shared.data(), d_shared, 128, cudaMemcpyDeviceToHost));
  std::memcpy(bits.data(), x.data(), x.size() * sizeof(float));
  print_words("inputs", bits, 0, 1, bits.size());
  for (int slot = 0; slot < kSlots; ++slot) {
    char key[16];
    snprintf(key, sizeof key, "slot%d", slot);
    print_words(key, out, slot, kSlots, pairs);
  }
  print_words("tensormap_global", map, 0, 1, 32);
  print_words("tensormap_shared", shared, 0, 1, 32);
  return 0;
}
