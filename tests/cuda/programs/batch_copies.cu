// cuMemcpyBatchAsync and cuMemcpy3DBatchAsync (CUDA 12.8+), as cuda.core's copy_batch calls them: one batch of
// host-to-device copies with two sets of attributes (stream order; read during the
// call, from a stack buffer overwritten right after), then device-to-device and
// device-to-host batches (any order), the same batch captured into a graph and
// replayed, and the arguments cuda.h refuses; then 3-D batches: a pitched host buffer
// into a 2-D CUDA array and the array into device memory (element size the array's),
// back to the host pointer to pointer (element size 1), and two refusals. Prints:
//   h2d=<bad> through=<bad, after device-to-device then device-to-host> graph=<bad>
//   refused=<n of 4> batch3d=<bad> refused3d=<n of 2>
// Exits 0 unless a call that must succeed fails.
#include <cuda.h>
#include <stdio.h>
#include <string.h>

#include <vector>

#include "driver_check.h"

namespace {

constexpr size_t kCopies = 5;
constexpr size_t kInts = 1000;

CUmemcpyAttributes attributes(CUmemcpySrcAccessOrder order) {
  CUmemcpyAttributes a;
  memset(&a, 0, sizeof a);
  a.srcAccessOrder = order;
  a.srcLocHint.type = CU_MEM_LOCATION_TYPE_HOST;
  a.dstLocHint.type = CU_MEM_LOCATION_TYPE_DEVICE;
  return a;
}

int compare(const std::vector<int>& got, int first) {
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) bad += got[i] != first + static_cast<int>(i);
  return bad;
}

}  // namespace

int main() {
  setup();
  CUstream stream;
  CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CUdeviceptr dev[kCopies], copy[kCopies];
  std::vector<std::vector<int>> host(kCopies, std::vector<int>(kInts));
  CUdeviceptr dsts[kCopies], srcs[kCopies];
  size_t sizes[kCopies];
  for (size_t c = 0; c < kCopies; ++c) {
    CHECK(cuMemAlloc(&dev[c], kInts * sizeof(int)));
    CHECK(cuMemAlloc(&copy[c], kInts * sizeof(int)));
    for (size_t i = 0; i < kInts; ++i) host[c][i] = static_cast<int>(c * 10000 + i);
    sizes[c] = kInts * sizeof(int);
  }
  // host to device: copies 0..2 in stream order, 3..4 read during the call from a
  // buffer this program overwrites as soon as the call returns
  std::vector<int> ephemeral[2] = {host[3], host[4]};
  for (size_t c = 0; c < kCopies; ++c) {
    dsts[c] = dev[c];
    srcs[c] = reinterpret_cast<CUdeviceptr>(c < 3 ? host[c].data() : ephemeral[c - 3].data());
  }
  CUmemcpyAttributes attrs[2] = {attributes(CU_MEMCPY_SRC_ACCESS_ORDER_STREAM),
                                 attributes(CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL)};
  size_t indices[2] = {0, 3};
  CHECK(cuMemcpyBatchAsync(dsts, srcs, sizes, kCopies, attrs, indices, 2, stream));
  for (auto& e : ephemeral) std::fill(e.begin(), e.end(), -1);
  CHECK(cuStreamSynchronize(stream));
  int bad = 0;
  for (size_t c = 0; c < kCopies; ++c) {
    std::vector<int> got(kInts);
    CHECK(cuMemcpyDtoH(got.data(), dev[c], sizes[c]));
    bad += compare(got, static_cast<int>(c * 10000));
  }
  printf("h2d=%d\n", bad);

  // device to device, then device to host, any source order
  CUmemcpyAttributes any = attributes(CU_MEMCPY_SRC_ACCESS_ORDER_ANY);
  size_t first = 0;
  for (size_t c = 0; c < kCopies; ++c) dsts[c] = copy[c], srcs[c] = dev[kCopies - 1 - c];
  CHECK(cuMemcpyBatchAsync(dsts, srcs, sizes, kCopies, &any, &first, 1, stream));
  std::vector<std::vector<int>> back(kCopies, std::vector<int>(kInts, 0));
  for (size_t c = 0; c < kCopies; ++c) dsts[c] = reinterpret_cast<CUdeviceptr>(back[c].data()), srcs[c] = copy[c];
  CHECK(cuMemcpyBatchAsync(dsts, srcs, sizes, kCopies, &any, &first, 1, stream));
  CHECK(cuStreamSynchronize(stream));
  int through = 0;
  for (size_t c = 0; c < kCopies; ++c) through += compare(back[c], static_cast<int>((kCopies - 1 - c) * 10000));
  printf("through=%d\n", through);

  // captured into a graph: the copies are its nodes, run when the graph is launched
  for (size_t c = 0; c < kCopies; ++c) dsts[c] = dev[c], srcs[c] = copy[c];
  CUgraph graph;
  CUgraphExec exec;
  CHECK(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CHECK(cuMemcpyBatchAsync(dsts, srcs, sizes, kCopies, &any, &first, 1, stream));
  CHECK(cuStreamEndCapture(stream, &graph));
  CHECK(cuGraphInstantiate(&exec, graph, 0));
  for (size_t c = 0; c < kCopies; ++c) CHECK(cuMemsetD32Async(dev[c], 0, kInts, stream));  // on the stream: a
  // memset is asynchronous for device memory, and this stream does not wait for the legacy one
  CHECK(cuGraphLaunch(exec, stream));
  CHECK(cuStreamSynchronize(stream));
  int graph_bad = 0;
  for (size_t c = 0; c < kCopies; ++c) {
    std::vector<int> got(kInts);
    CHECK(cuMemcpyDtoH(got.data(), dev[c], sizes[c]));
    graph_bad += compare(got, static_cast<int>((kCopies - 1 - c) * 10000));
  }
  printf("graph=%d\n", graph_bad);

  // what cuda.h refuses: the legacy stream, attribute indices not starting at 0 or not
  // rising, an attribute without a source access order
  int refused = 0;
  size_t late = 1, twice[2] = {0, 0};
  CUmemcpyAttributes none = attributes(CU_MEMCPY_SRC_ACCESS_ORDER_INVALID), pair[2] = {any, any};
  refused += cuMemcpyBatchAsync(dsts, srcs, sizes, kCopies, &any, &first, 1, CU_STREAM_LEGACY) ==
             CUDA_ERROR_INVALID_VALUE;
  refused += cuMemcpyBatchAsync(dsts, srcs, sizes, kCopies, &any, &late, 1, stream) == CUDA_ERROR_INVALID_VALUE;
  refused += cuMemcpyBatchAsync(dsts, srcs, sizes, kCopies, pair, twice, 2, stream) == CUDA_ERROR_INVALID_VALUE;
  refused += cuMemcpyBatchAsync(dsts, srcs, sizes, kCopies, &none, &first, 1, stream) == CUDA_ERROR_INVALID_VALUE;
  printf("refused=%d\n", refused);
  CHECK(cuStreamSynchronize(stream));

  // 3-D batches: host (rows of 80 floats, 64 used) -> 64x32 float array -> device (tight)
  const size_t w = 64, h = 32, host_row = 80;
  std::vector<float> pitched(host_row * h, -1.0f), back2d(w * h, 0.0f);
  for (size_t y = 0; y < h; ++y)
    for (size_t x = 0; x < w; ++x) pitched[y * host_row + x] = static_cast<float>(y * 1000 + x);
  CUDA_ARRAY3D_DESCRIPTOR desc;
  memset(&desc, 0, sizeof desc);
  desc.Width = w, desc.Height = h, desc.Depth = 0, desc.Format = CU_AD_FORMAT_FLOAT, desc.NumChannels = 1;
  CUarray array;
  CHECK(cuArray3DCreate(&array, &desc));
  CUdeviceptr tight;
  CHECK(cuMemAlloc(&tight, w * h * sizeof(float)));
  CUDA_MEMCPY3D_BATCH_OP ops[2];
  memset(ops, 0, sizeof ops);
  ops[0].src.type = CU_MEMCPY_OPERAND_TYPE_POINTER;
  ops[0].src.op.ptr.ptr = reinterpret_cast<CUdeviceptr>(pitched.data());
  ops[0].src.op.ptr.rowLength = host_row;
  ops[0].dst.type = CU_MEMCPY_OPERAND_TYPE_ARRAY;
  ops[0].dst.op.array.array = array;
  ops[0].extent = {w, h, 1};
  ops[0].srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
  CHECK(cuMemcpy3DBatchAsync(1, ops, 0, stream));
  ops[1].src.type = CU_MEMCPY_OPERAND_TYPE_ARRAY;
  ops[1].src.op.array.array = array;
  ops[1].dst.type = CU_MEMCPY_OPERAND_TYPE_POINTER;
  ops[1].dst.op.ptr.ptr = tight;
  ops[1].extent = {w, h, 1};
  ops[1].srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
  CHECK(cuMemcpy3DBatchAsync(1, &ops[1], 0, stream));
  CUDA_MEMCPY3D_BATCH_OP to_host;
  memset(&to_host, 0, sizeof to_host);
  to_host.src.type = to_host.dst.type = CU_MEMCPY_OPERAND_TYPE_POINTER;
  to_host.src.op.ptr.ptr = tight;
  to_host.dst.op.ptr.ptr = reinterpret_cast<CUdeviceptr>(back2d.data());
  to_host.extent = {w * sizeof(float), h, 1};   // pointer to pointer: elements are bytes
  to_host.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_ANY;
  CHECK(cuMemcpy3DBatchAsync(1, &to_host, 0, stream));
  CHECK(cuStreamSynchronize(stream));
  int bad3d = 0;
  for (size_t y = 0; y < h; ++y)
    for (size_t x = 0; x < w; ++x) bad3d += back2d[y * w + x] != static_cast<float>(y * 1000 + x);
  CUDA_MEMCPY3D_BATCH_OP short_rows = ops[0];
  short_rows.src.op.ptr.rowLength = w - 1;    // rows shorter than the copy
  int refused3d = (cuMemcpy3DBatchAsync(1, ops, 1, stream) == CUDA_ERROR_INVALID_VALUE) +
                  (cuMemcpy3DBatchAsync(1, &short_rows, 0, stream) == CUDA_ERROR_INVALID_VALUE);
  printf("batch3d=%d refused3d=%d\n", bad3d, refused3d);
  CHECK(cuStreamSynchronize(stream));
  return 0;
}
