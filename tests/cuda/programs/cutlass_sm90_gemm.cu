// One CUTLASS 3 Hopper GEMM (sm_90a) through the CollectiveBuilder / GemmUniversal /
// GemmUniversalAdapter path: the warp-specialized kernel (KernelTmaWarpSpecialized: a
// producer warpgroup issuing TMA loads into a two-stage mbarrier pipeline, a consumer
// warpgroup issuing wgmma.mma_async on shared-memory descriptors), a TMA epilogue
// (TmaWarpSpecialized: C loaded and D stored by TMA), clusters of 2x1x1 CTAs (B is
// multicast to both CTAs of a cluster). D = alpha * A.B + beta * C with half A (row-major)
// and B (column-major), i.e. both K-major, float accumulator, float C and D (row-major).
//
// Built from the headers of the PyPI package nvidia-cutlass (4.2.0.0):
//   nvcc -std=c++17 -arch=sm_90a --expt-relaxed-constexpr \
//        -I<site-packages>/cutlass_library/source/include cutlass_sm90_gemm.cu
// (nvcc 13's -arch=sm_90a also embeds a generic compute_90 PTX, in which CUTLASS compiles
// the kernel to an error printf: a loader must take the compute_90a PTX on a 9.0 device.
// tests/test_e2e_cutlass.py builds PTX only: -gencode arch=compute_90a,code=compute_90a.)
//
// Small integers in A, B and C keep every product and sum exact in float, so the result
// is compared exactly with a float reference computed on the host. Prints
// "cutlass_sm90_gemm ok M=... N=... K=..." and returns 0, or the first mismatch and 1.
// Optional arguments M N K [runs] (multiples of 256, 128 and 64; defaults 256 128 256: one
// cluster of two CTAs, four k-tiles through the two pipeline stages, so each stage's
// full/empty barriers go round twice).
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cutlass/cutlass.h"
#include "cute/tensor.hpp"
#include "cutlass/numeric_types.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"

#include "runtime_check.h"

#if !defined(CUTLASS_ARCH_MMA_SM90_SUPPORTED)
#error "CUTLASS's SM90 kernels need CUDA 12 or newer (CUTLASS_ARCH_MMA_SM90_SUPPORTED)"
#endif

namespace {

using namespace cute;

using ElementA = cutlass::half_t;
using LayoutA = cutlass::layout::RowMajor;      // M x K, K contiguous
using ElementB = cutlass::half_t;
using LayoutB = cutlass::layout::ColumnMajor;   // K x N, K contiguous
#ifdef GEMM_HALF_OUTPUT   // half C and D: the epilogue stages D in shared memory with stmatrix
using ElementC = cutlass::half_t;
using ElementD = cutlass::half_t;
#else
using ElementC = float;
using ElementD = float;
#endif
using LayoutC = cutlass::layout::RowMajor;      // M x N, N contiguous
using LayoutD = cutlass::layout::RowMajor;
using ElementAccumulator = float;
using ElementCompute = float;

// 16-byte accesses (what TMA needs)
constexpr int kAlignA = 16 / sizeof(ElementA);
constexpr int kAlignB = 16 / sizeof(ElementB);
constexpr int kAlignC = 16 / sizeof(ElementC);
constexpr int kAlignD = 16 / sizeof(ElementD);

// Variants for narrowing down a failure: -DGEMM_CLUSTER_M=1 (no cluster, no multicast),
// -DGEMM_NO_SMEM_EPILOGUE (the epilogue reads C and writes D with plain global loads and
// stores from registers instead of TMA through shared memory), and -DGEMM_HALF_OUTPUT
// (half C and D instead of float) for more of the epilogue's instructions.
#ifndef GEMM_CLUSTER_M
#define GEMM_CLUSTER_M 2
#endif
using TileShape = Shape<_128, _128, _64>;       // per CTA: M x N x K
using ClusterShape = Shape<Int<GEMM_CLUSTER_M>, _1, _1>;   // CTAs along M share (multicast) B
constexpr int kClusterM = GEMM_CLUSTER_M;
constexpr int kTileM = 128, kTileN = 128, kTileK = 64;

using MainloopSchedule = cutlass::gemm::KernelTmaWarpSpecialized;
#ifdef GEMM_NO_SMEM_EPILOGUE
using EpilogueSchedule = cutlass::epilogue::NoSmemWarpSpecialized;
#else
using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecialized;
#endif

using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
    TileShape, ClusterShape,
    cutlass::epilogue::collective::EpilogueTileAuto,
    ElementAccumulator, ElementCompute,
    ElementC, LayoutC, kAlignC,
    ElementD, LayoutD, kAlignD,
    EpilogueSchedule>::CollectiveOp;

// Two stages on purpose: with four k-tiles the producer has to wait for the consumer
// to release a stage, and the barriers' phases flip.
using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
    ElementA, LayoutA, kAlignA,
    ElementB, LayoutB, kAlignB,
    ElementAccumulator,
    TileShape, ClusterShape,
    cutlass::gemm::collective::StageCount<2>,
    MainloopSchedule>::CollectiveOp;

using GemmKernel = cutlass::gemm::kernel::GemmUniversal<
    Shape<int, int, int, int>,   // M, N, K, L (batch)
    Mainloop, Epilogue>;
using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;

using StrideA = typename GemmKernel::StrideA;
using StrideB = typename GemmKernel::StrideB;
using StrideC = typename GemmKernel::StrideC;
using StrideD = typename GemmKernel::StrideD;

// Packed strides for one batch: the dynamic modes (leading dimension, batch stride) are set,
// the unit stride is a compile-time 1 in the stride type.
template <class Stride>
Stride packed(int rows, int cols) {   // rows x cols, the cols mode contiguous
  Stride s{};
  get<0>(s) = static_cast<int64_t>(cols);
  get<2>(s) = static_cast<int64_t>(rows) * cols;
  return s;
}

int small(int i, int j, int a, int b) { return (i * a + j * b) % 5 - 2; }

const char* status_name(cutlass::Status s) { return cutlassGetStatusString(s); }

}  // namespace

int main(int argc, char** argv) {
  int M = kClusterM * kTileM, N = kTileN, K = 4 * kTileK, runs = 1;
  if (argc >= 4) {
    M = atoi(argv[1]);
    N = atoi(argv[2]);
    K = atoi(argv[3]);
  }
  if (argc >= 5) runs = atoi(argv[4]);   // the same GEMM again (D does not change)
  if (M <= 0 || N <= 0 || K <= 0 || M % (kClusterM * kTileM) || N % kTileN || K % kTileK) {
    printf("bad sizes M=%d N=%d K=%d\n", M, N, K);
    return 1;
  }
  const float alpha = 2.0f, beta = -1.0f;

  // A: M x K row-major; B: K x N column-major (element (k, n) at n * K + k); C, D: M x N row-major.
  std::vector<ElementA> a(size_t(M) * K);
  std::vector<ElementB> b(size_t(K) * N);
  std::vector<ElementC> c(size_t(M) * N);
  std::vector<float> fa(a.size()), fb(b.size());
  for (int m = 0; m < M; ++m)
    for (int k = 0; k < K; ++k) {
      fa[size_t(m) * K + k] = float(small(m, k, 7, 3));
      a[size_t(m) * K + k] = ElementA(fa[size_t(m) * K + k]);
    }
  for (int n = 0; n < N; ++n)
    for (int k = 0; k < K; ++k) {
      fb[size_t(n) * K + k] = float(small(k, n, 3, 5));
      b[size_t(n) * K + k] = ElementB(fb[size_t(n) * K + k]);
    }
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) c[size_t(m) * N + n] = ElementC(float(small(m, n, 1, 2)));

  ElementA* d_a = nullptr;
  ElementB* d_b = nullptr;
  ElementC* d_c = nullptr;
  ElementD* d_d = nullptr;
  CHECK(cudaMalloc(&d_a, a.size() * sizeof(ElementA)));
  CHECK(cudaMalloc(&d_b, b.size() * sizeof(ElementB)));
  CHECK(cudaMalloc(&d_c, c.size() * sizeof(ElementC)));
  CHECK(cudaMalloc(&d_d, c.size() * sizeof(ElementD)));
  CHECK(cudaMemcpy(d_a, a.data(), a.size() * sizeof(ElementA), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d_b, b.data(), b.size() * sizeof(ElementB), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d_c, c.data(), c.size() * sizeof(ElementC), cudaMemcpyHostToDevice));
  CHECK(cudaMemset(d_d, 0xff, c.size() * sizeof(ElementD)));   // NaNs: unwritten outputs show

  typename Gemm::Arguments args{
      cutlass::gemm::GemmUniversalMode::kGemm,
      {M, N, K, 1},
      {d_a, packed<StrideA>(M, K), d_b, packed<StrideB>(N, K)},
      {{alpha, beta}, d_c, packed<StrideC>(M, N), d_d, packed<StrideD>(M, N)}};

  Gemm gemm;
  cutlass::Status st = gemm.can_implement(args);
  if (st != cutlass::Status::kSuccess) {
    printf("gemm.can_implement failed: %d %s\n", int(st), status_name(st));
    return 1;
  }
  size_t workspace_bytes = Gemm::get_workspace_size(args);
  void* workspace = nullptr;
  if (workspace_bytes) CHECK(cudaMalloc(&workspace, workspace_bytes));
  st = gemm.initialize(args, workspace);
  if (st != cutlass::Status::kSuccess) {
    printf("gemm.initialize failed: %d %s (last CUDA error %s)\n", int(st), status_name(st),
           cudaGetErrorName(cudaGetLastError()));
    return 1;
  }
  for (int r = 0; r < runs; ++r) {
    st = gemm.run();
    if (st != cutlass::Status::kSuccess) {
      printf("gemm.run failed: %d %s (last CUDA error %s)\n", int(st), status_name(st),
             cudaGetErrorName(cudaGetLastError()));
      return 1;
    }
  }
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());

  std::vector<ElementD> d(c.size());
  CHECK(cudaMemcpy(d.data(), d_d, d.size() * sizeof(ElementD), cudaMemcpyDeviceToHost));

  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      float acc = 0.0f;
      for (int k = 0; k < K; ++k) acc += fa[size_t(m) * K + k] * fb[size_t(n) * K + k];
      // exact in float; rounded once to the output type, as the epilogue rounds
      float want = float(ElementD(alpha * acc + beta * float(c[size_t(m) * N + n])));
      float got = float(d[size_t(m) * N + n]);
      if (got != want) {
        printf("cutlass_sm90_gemm mismatch at m=%d n=%d: got %g want %g (M=%d N=%d K=%d)\n", m, n, got,
               want, M, N, K);
        return 1;
      }
    }

  if (workspace) CHECK(cudaFree(workspace));
  CHECK(cudaFree(d_a));
  CHECK(cudaFree(d_b));
  CHECK(cudaFree(d_c));
  CHECK(cudaFree(d_d));
  printf("cutlass_sm90_gemm ok M=%d N=%d K=%d\n", M, N, K);
  return 0;
}
