// Warp matrix functions (nvcuda::wmma): one warp multiplies tiles of every fragment
// type the emulator runs, from global and shared memory, row and column major, with
// strides wider than the tile, and scales a fragment element by element (which any
// layout must allow); each product is checked against the CPU's. Small integers
// keep every sum exact, so results must be equal. Prints `<case>_good=N of N`.
#include <mma.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdio>
#include <vector>

using namespace nvcuda;

constexpr int LD = 40;   // every matrix's leading dimension in memory (wider than any tile)

template <class T>
static T from_int(int v);
template <> __half from_int<__half>(int v) { return __float2half(float(v)); }
template <> __nv_bfloat16 from_int<__nv_bfloat16>(int v) { return __float2bfloat16(float(v)); }
template <> float from_int<float>(int v) { return float(v); }
template <> double from_int<double>(int v) { return double(v); }
template <> int from_int<int>(int v) { return v; }
template <> unsigned char from_int<unsigned char>(int v) { return (unsigned char)v; }

// D = 2 * (A B + C), A row major, B column major, C and D row major, via global memory.
template <int M, int N, int K, class In, class Acc, class Frag = In>
__global__ void gemm(const In* a, const In* b, const Acc* c, Acc* d) {
  wmma::fragment<wmma::matrix_a, M, N, K, Frag, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, M, N, K, Frag, wmma::col_major> fb;
  wmma::fragment<wmma::accumulator, M, N, K, Acc> fc;
  wmma::load_matrix_sync(fa, a, LD);
  wmma::load_matrix_sync(fb, b, LD);
  wmma::load_matrix_sync(fc, c, LD, wmma::mem_row_major);
  wmma::mma_sync(fc, fa, fb, fc);
  for (int i = 0; i < fc.num_elements; ++i) fc.x[i] = fc.x[i] * Acc(2);
  wmma::store_matrix_sync(d, fc, LD, wmma::mem_row_major);
}

// The same through shared memory, B row major, D column major.
__global__ void gemm_shared(const __half* a, const __half* b, const float* c, float* d) {
  __shared__ __half sa[16 * LD], sb[16 * LD];
  __shared__ float sc[16 * LD];
  for (int i = threadIdx.x; i < 16 * LD; i += 32) sa[i] = a[i], sb[i] = b[i], sc[i] = c[i];
  __syncwarp();
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
  wmma::load_matrix_sync(fa, sa, LD);
  wmma::load_matrix_sync(fb, sb, LD);
  wmma::load_matrix_sync(fc, sc, LD, wmma::mem_row_major);
  wmma::mma_sync(fc, fa, fb, fc);
  for (int i = 0; i < fc.num_elements; ++i) fc.x[i] = fc.x[i] * 2.0f;
  wmma::store_matrix_sync(sc, fc, LD, wmma::mem_col_major);
  __syncwarp();
  for (int i = threadIdx.x; i < 16 * LD; i += 32) d[i] = sc[i];
}

__global__ void gemm_tf32(const float* a, const float* b, const float* c, float* d) {
  wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::col_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 8, float> fc;
  wmma::load_matrix_sync(fa, a, LD);
  wmma::load_matrix_sync(fb, b, LD);
  for (int i = 0; i < fa.num_elements; ++i) fa.x[i] = wmma::__float_to_tf32(fa.x[i]);
  for (int i = 0; i < fb.num_elements; ++i) fb.x[i] = wmma::__float_to_tf32(fb.x[i]);
  wmma::load_matrix_sync(fc, c, LD, wmma::mem_row_major);
  wmma::mma_sync(fc, fa, fb, fc);
  for (int i = 0; i < fc.num_elements; ++i) fc.x[i] = fc.x[i] * 2.0f;
  wmma::store_matrix_sync(d, fc, LD, wmma::mem_row_major);
}

template <class In, class Acc>
struct Case {
  std::vector<In> a, b;
  std::vector<Acc> c, d;
  std::vector<double> want;
  In *da, *db;
  Acc *dc, *dd;
  Case(int M, int N, int K, bool b_row_major = false, bool d_col_major = false)
      : a(64 * LD), b(64 * LD), c(64 * LD), d(64 * LD), want(64 * LD, 0) {
    std::vector<int> ia(64 * LD), ib(64 * LD), ic(64 * LD);
    for (int i = 0; i < 64 * LD; ++i) {
      ia[i] = (i * 7 + 3) % 5 - 2;
      ib[i] = (i * 11 + 1) % 7 - 3;
      ic[i] = (i * 13) % 9 - 4;
      a[i] = from_int<In>(ia[i]);
      b[i] = from_int<In>(ib[i]);
      c[i] = from_int<Acc>(ic[i]);
    }
    for (int r = 0; r < M; ++r)
      for (int col = 0; col < N; ++col) {
        double s = ic[r * LD + col];
        for (int k = 0; k < K; ++k) s += double(ia[r * LD + k]) * ib[b_row_major ? k * LD + col : col * LD + k];
        want[d_col_major ? col * LD + r : r * LD + col] = 2 * s;
      }
    cudaMalloc(&da, a.size() * sizeof(In));
    cudaMalloc(&db, b.size() * sizeof(In));
    cudaMalloc(&dc, c.size() * sizeof(Acc));
    cudaMalloc(&dd, d.size() * sizeof(Acc));
    cudaMemcpy(da, a.data(), a.size() * sizeof(In), cudaMemcpyHostToDevice);
    cudaMemcpy(db, b.data(), b.size() * sizeof(In), cudaMemcpyHostToDevice);
    cudaMemcpy(dc, c.data(), c.size() * sizeof(Acc), cudaMemcpyHostToDevice);
    cudaMemset(dd, 0, d.size() * sizeof(Acc));
  }
  void check(const char* name, int M, int N, bool d_col_major = false, bool half_result = false) {
    cudaError_t e = cudaMemcpy(d.data(), dd, d.size() * sizeof(Acc), cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) {
      std::printf("%s_error=%s\n", name, cudaGetErrorName(e));
      return;
    }
    int good = 0;
    for (int r = 0; r < M; ++r)
      for (int col = 0; col < N; ++col) {
        int at = d_col_major ? col * LD + r : r * LD + col;
        double got = half_result ? double(__half2float(*reinterpret_cast<const __half*>(&d[at]))) : double(d[at]);
        good += got == want[at];
      }
    std::printf("%s_good=%d of %d\n", name, good, M * N);
  }
};

int main() {
  {
    Case<__half, float> t(16, 16, 16);
    gemm<16, 16, 16, __half, float><<<1, 32>>>(t.da, t.db, t.dc, t.dd);
    t.check("f16_m16n16k16", 16, 16);
  }
  {
    Case<__half, __half> t(32, 8, 16);
    gemm<32, 8, 16, __half, __half><<<1, 32>>>(t.da, t.db, t.dc, t.dd);
    t.check("f16_m32n8k16_f16acc", 32, 8, false, true);
  }
  {
    Case<__half, float> t(8, 32, 16);
    gemm<8, 32, 16, __half, float><<<1, 32>>>(t.da, t.db, t.dc, t.dd);
    t.check("f16_m8n32k16", 8, 32);
  }
  {
    Case<__nv_bfloat16, float> t(16, 16, 16);
    gemm<16, 16, 16, __nv_bfloat16, float><<<1, 32>>>(t.da, t.db, t.dc, t.dd);
    t.check("bf16_m16n16k16", 16, 16);
  }
  {
    Case<unsigned char, int> t(16, 16, 16);
    // u8 inputs are 0..255: the Case's negative values wrap, as the CPU's casts do
    for (int r = 0; r < 16; ++r)
      for (int col = 0; col < 16; ++col) {
        double s = t.c[r * LD + col];
        for (int k = 0; k < 16; ++k) s += double(t.a[r * LD + k]) * t.b[col * LD + k];
        t.want[r * LD + col] = 2 * s;
      }
    gemm<16, 16, 16, unsigned char, int><<<1, 32>>>(t.da, t.db, t.dc, t.dd);
    t.check("u8_m16n16k16", 16, 16);
  }
  {
    Case<double, double> t(8, 8, 4);
    gemm<8, 8, 4, double, double><<<1, 32>>>(t.da, t.db, t.dc, t.dd);
    t.check("f64_m8n8k4", 8, 8);
  }
  {
    Case<float, float> t(16, 16, 8);
    gemm_tf32<<<1, 32>>>(t.da, t.db, t.dc, t.dd);
    t.check("tf32_m16n16k8", 16, 16);
  }
  {
    Case<__half, float> t(16, 16, 16, true, true);
    gemm_shared<<<1, 32>>>(t.da, t.db, t.dc, t.dd);
    t.check("f16_shared_col_major", 16, 16, true);
  }
  std::printf("done=1\n");
  return 0;
}
