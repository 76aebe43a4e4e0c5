// One CUTLASS 3 Hopper convolution (sm_90a): a 2-D forward convolution as an implicit
// GEMM through CUTLASS's conv CollectiveBuilder / ConvUniversal / ConvUniversalAdapter
// path. Its warp-specialized mainloop loads the activation with TMA in im2col mode (the
// tensor map from cuTensorMapEncodeIm2col, the copies cp.async.bulk.tensor...im2col with
// CUTLASS's own corners and offsets for the padding, stride and filter position) and
// the filter with tiled TMA, and multiplies with wgmma; the epilogue stores by TMA.
//
// out[n][p][q][k] = alpha * sum_{r,s,c} act[n][p*stride - pad + r][q*stride - pad + s][c]
//                            * flt[k][r][s][c] + beta * in[n][p][q][k]
// with half act (NHWC) and flt (KRSC), float accumulator and output (NPQK). Small
// integers keep every product and sum exact in float, so the host's reference is exact.
//
// Built from the nvidia-cutlass package's headers, as tests/test_e2e_cutlass.py builds
// its GEMM (PTX for compute_90a). Arguments: N H W C K R S pad stride (defaults
// 2 10 10 64 64 3 3 1 1). Prints "cutlass_sm90_conv ok ..." and returns 0, or the first
// mismatch and 1.
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cutlass/cutlass.h"
#include "cute/tensor.hpp"
#include "cutlass/numeric_types.h"
#include "cutlass/kernel_hardware_info.hpp"   // the conv collectives use it without including it
#include "cutlass/conv/convnd_problem_shape.hpp"
#include "cutlass/conv/collective/collective_builder.hpp"
#include "cutlass/conv/kernel/conv_universal.hpp"
#include "cutlass/conv/device/conv_universal_adapter.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"

#include "runtime_check.h"

#if !defined(CUTLASS_ARCH_MMA_SM90_SUPPORTED)
#error "CUTLASS's SM90 kernels need CUDA 12 or newer (CUTLASS_ARCH_MMA_SM90_SUPPORTED)"
#endif

namespace {

using namespace cute;

using ElementAct = cutlass::half_t;
using ElementFlt = cutlass::half_t;
using ElementOut = float;
using ElementAcc = float;
using TileShape = Shape<_64, _64, Shape<_64>>;
using ClusterShape = Shape<_1, _1, _1>;

using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
    cutlass::epilogue::collective::EpilogueTileAuto, ElementAcc, ElementAcc,
    ElementOut, cutlass::layout::TensorNHWC, 128 / cutlass::sizeof_bits<ElementOut>::value,
    ElementOut, cutlass::layout::TensorNHWC, 128 / cutlass::sizeof_bits<ElementOut>::value,
    cutlass::epilogue::TmaWarpSpecialized>::CollectiveOp;

using Mainloop = typename cutlass::conv::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, cutlass::conv::Operator::kFprop,
    ElementAct, cutlass::layout::TensorNHWC, 8, ElementFlt, cutlass::layout::TensorNHWC, 8, ElementAcc,
    TileShape, ClusterShape,
    cutlass::conv::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
    cutlass::conv::collective::KernelScheduleAuto>::CollectiveOp;

using ProblemShape = cutlass::conv::ConvProblemShape<cutlass::conv::Operator::kFprop, 2>;
using Kernel = cutlass::conv::kernel::ConvUniversal<ProblemShape, Mainloop, Epilogue>;
using Conv = cutlass::conv::device::ConvUniversalAdapter<Kernel>;

int small(int a, int b, int c, int d) { return (a * 3 + b * 5 + c * 7 + d) % 5 - 2; }

}  // namespace

int main(int argc, char** argv) {
  int v[9] = {2, 10, 10, 64, 64, 3, 3, 1, 1};
  for (int i = 0; i < 9 && i + 1 < argc; ++i) v[i] = atoi(argv[i + 1]);
  const int N = v[0], H = v[1], W = v[2], C = v[3], K = v[4], R = v[5], S = v[6], pad = v[7], stride = v[8];
  const int P = (H + 2 * pad - R) / stride + 1, Q = (W + 2 * pad - S) / stride + 1;
  const float alpha = 1.0f, beta = 1.0f;

  std::vector<ElementAct> act(size_t(N) * H * W * C);
  std::vector<ElementFlt> flt(size_t(K) * R * S * C);
  std::vector<ElementOut> in(size_t(N) * P * Q * K);
  for (int n = 0; n < N; ++n)
    for (int h = 0; h < H; ++h)
      for (int w = 0; w < W; ++w)
        for (int c = 0; c < C; ++c) act[((size_t(n) * H + h) * W + w) * C + c] = ElementAct(float(small(n, h, w, c)));
  for (int k = 0; k < K; ++k)
    for (int r = 0; r < R; ++r)
      for (int s = 0; s < S; ++s)
        for (int c = 0; c < C; ++c) flt[((size_t(k) * R + r) * S + s) * C + c] = ElementFlt(float(small(c, k, r, s)));
  for (size_t i = 0; i < in.size(); ++i) in[i] = float(int(i % 7) - 3);

  ElementAct* d_act = nullptr;
  ElementFlt* d_flt = nullptr;
  ElementOut *d_in = nullptr, *d_out = nullptr;
  CHECK(cudaMalloc(&d_act, act.size() * sizeof(ElementAct)));
  CHECK(cudaMalloc(&d_flt, flt.size() * sizeof(ElementFlt)));
  CHECK(cudaMalloc(&d_in, in.size() * sizeof(ElementOut)));
  CHECK(cudaMalloc(&d_out, in.size() * sizeof(ElementOut)));
  CHECK(cudaMemcpy(d_act, act.data(), act.size() * sizeof(ElementAct), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d_flt, flt.data(), flt.size() * sizeof(ElementFlt), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d_in, in.data(), in.size() * sizeof(ElementOut), cudaMemcpyHostToDevice));
  CHECK(cudaMemset(d_out, 0xff, in.size() * sizeof(ElementOut)));   // NaNs: unwritten outputs show

  ProblemShape problem(cutlass::conv::Mode::kCrossCorrelation, {N, H, W, C}, {K, R, S, C}, {pad, pad}, {pad, pad},
                       {stride, stride}, {1, 1}, 1);
  // The output's strides as the epilogue takes them (innermost spatial first), from the
  // problem's packed NPQK layout.
  typename Kernel::StrideC stride_c;
  typename Kernel::StrideD stride_d;
  for_each(make_seq<rank<0>(typename Kernel::StrideC{})>{}, [&](auto i) {
    get<0, i>(stride_c) = problem.stride_C[ProblemShape::RankT - 2 - i];
    get<0, i>(stride_d) = problem.stride_C[ProblemShape::RankT - 2 - i];
  });
  typename Conv::Arguments args{problem, {d_act, d_flt}, {{alpha, beta}, d_in, stride_c, d_out, stride_d}};

  Conv conv;
  cutlass::Status st = conv.can_implement(args);
  if (st != cutlass::Status::kSuccess) {
    printf("conv.can_implement failed: %s\n", cutlassGetStatusString(st));
    return 1;
  }
  size_t workspace_bytes = Conv::get_workspace_size(args);
  void* workspace = nullptr;
  if (workspace_bytes) CHECK(cudaMalloc(&workspace, workspace_bytes));
  st = conv.initialize(args, workspace);
  if (st == cutlass::Status::kSuccess) st = conv.run();
  if (st != cutlass::Status::kSuccess) {
    printf("conv failed: %s (last CUDA error %s)\n", cutlassGetStatusString(st), cudaGetErrorName(cudaGetLastError()));
    return 1;
  }
  CHECK(cudaDeviceSynchronize());
  std::vector<ElementOut> out(in.size());
  CHECK(cudaMemcpy(out.data(), d_out, out.size() * sizeof(ElementOut), cudaMemcpyDeviceToHost));

  for (int n = 0; n < N; ++n)
    for (int p = 0; p < P; ++p)
      for (int q = 0; q < Q; ++q)
        for (int k = 0; k < K; ++k) {
          float acc = 0.0f;
          for (int r = 0; r < R; ++r)
            for (int s = 0; s < S; ++s) {
              const int h = p * stride - pad + r, w = q * stride - pad + s;
              if (h < 0 || h >= H || w < 0 || w >= W) continue;
              for (int c = 0; c < C; ++c)
                acc += float(act[((size_t(n) * H + h) * W + w) * C + c]) * float(flt[((size_t(k) * R + r) * S + s) * C + c]);
            }
          const size_t at = ((size_t(n) * P + p) * Q + q) * K + k;
          const float want = alpha * acc + beta * in[at];
          if (out[at] != want) {
            printf("cutlass_sm90_conv mismatch at n=%d p=%d q=%d k=%d: got %g want %g\n", n, p, q, k, out[at], want);
            return 1;
          }
        }
  printf("cutlass_sm90_conv ok N=%d H=%d W=%d C=%d K=%d R=%d S=%d pad=%d stride=%d P=%d Q=%d\n", N, H, W, C, K, R, S,
         pad, stride, P, Q);
  return 0;
}
