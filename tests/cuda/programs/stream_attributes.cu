// Stream attributes as CUDA C++ programs set them: an L2 access-policy window over
// a buffer the stream's kernels then use, the synchronization policy and the
// priority, each read back; cudaStreamCopyAttributes to a second stream; the
// default stream's own window; and what must be refused (a window larger than
// the device allows, a hit ratio above 1, an attribute that is not a stream's).
#include <cstdio>
#include <vector>

#include "runtime_check.h"

__global__ void add_one(int* data, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] += 1;
}

int same_window(const cudaAccessPolicyWindow& a, const cudaAccessPolicyWindow& b) {
  return a.base_ptr == b.base_ptr && a.num_bytes == b.num_bytes && a.hitRatio == b.hitRatio &&
         a.hitProp == b.hitProp && a.missProp == b.missProp;
}

int main() {
  const int n = 1 << 16;
  int* d_data;
  CHECK(cudaMalloc(&d_data, n * sizeof(int)));
  CHECK(cudaMemset(d_data, 0, n * sizeof(int)));
  int max_window = 0;
  CHECK(cudaDeviceGetAttribute(&max_window, cudaDevAttrMaxAccessPolicyWindowSize, 0));
  cudaStream_t stream, copy;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&copy, cudaStreamNonBlocking));

  cudaStreamAttrValue set = {};
  set.accessPolicyWindow.base_ptr = d_data;
  set.accessPolicyWindow.num_bytes = n * sizeof(int);
  set.accessPolicyWindow.hitRatio = 0.75f;
  set.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
  set.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
  CHECK(cudaStreamSetAttribute(stream, cudaStreamAttributeAccessPolicyWindow, &set));
  cudaStreamAttrValue got = {};
  CHECK(cudaStreamGetAttribute(stream, cudaStreamAttributeAccessPolicyWindow, &got));
  const int window_read_back = same_window(set.accessPolicyWindow, got.accessPolicyWindow);

  cudaStreamAttrValue policy = {};
  policy.syncPolicy = cudaSyncPolicyYield;
  CHECK(cudaStreamSetAttribute(stream, cudaStreamAttributeSynchronizationPolicy, &policy));
  CHECK(cudaStreamGetAttribute(stream, cudaStreamAttributeSynchronizationPolicy, &got));
  const int sync_policy = (int)got.syncPolicy;

  cudaStreamAttrValue priority = {};
  priority.priority = -3;
  CHECK(cudaStreamSetAttribute(stream, cudaStreamAttributePriority, &priority));
  CHECK(cudaStreamGetAttribute(stream, cudaStreamAttributePriority, &got));
  int stream_priority = 0;
  CHECK(cudaStreamGetPriority(stream, &stream_priority));
  printf("max_window=%d window_read_back=%d sync_policy=%d priority=%d get_priority=%d\n", max_window,
         window_read_back, sync_policy, got.priority, stream_priority);

  // The stream's kernels run as before under the window.
  for (int round = 0; round < 3; ++round) add_one<<<n / 256, 256, 0, stream>>>(d_data, n);
  CHECK(cudaGetLastError());
  CHECK(cudaStreamSynchronize(stream));
  std::vector<int> host(n);
  CHECK(cudaMemcpy(host.data(), d_data, n * sizeof(int), cudaMemcpyDeviceToHost));
  int wrong = 0;
  for (int i = 0; i < n; ++i) wrong += host[i] != 3;
  printf("kernel_wrong=%d\n", wrong);

  CHECK(cudaStreamCopyAttributes(copy, stream));
  cudaStreamAttrValue copied_window = {}, copied_policy = {}, copied_priority = {};
  CHECK(cudaStreamGetAttribute(copy, cudaStreamAttributeAccessPolicyWindow, &copied_window));
  CHECK(cudaStreamGetAttribute(copy, cudaStreamAttributeSynchronizationPolicy, &copied_policy));
  CHECK(cudaStreamGetAttribute(copy, cudaStreamAttributePriority, &copied_priority));
  printf("copied_window=%d copied_sync_policy=%d copied_priority=%d\n",
         same_window(set.accessPolicyWindow, copied_window.accessPolicyWindow), (int)copied_policy.syncPolicy,
         copied_priority.priority);

  // The default stream has attributes of its own; clearing a window is num_bytes 0.
  CHECK(cudaStreamSetAttribute(0, cudaStreamAttributeAccessPolicyWindow, &set));
  CHECK(cudaStreamGetAttribute(0, cudaStreamAttributeAccessPolicyWindow, &got));
  const int default_window = same_window(set.accessPolicyWindow, got.accessPolicyWindow);
  cudaStreamAttrValue cleared = {};
  CHECK(cudaStreamSetAttribute(0, cudaStreamAttributeAccessPolicyWindow, &cleared));
  CHECK(cudaStreamGetAttribute(0, cudaStreamAttributeAccessPolicyWindow, &got));
  printf("default_window=%d default_cleared_bytes=%zu\n", default_window, got.accessPolicyWindow.num_bytes);

  // Refused: each leaves the stream's window as it was.
  cudaStreamAttrValue too_large = set;
  too_large.accessPolicyWindow.num_bytes = (size_t)max_window + 1;
  const int too_large_rc = (int)cudaStreamSetAttribute(stream, cudaStreamAttributeAccessPolicyWindow, &too_large);
  cudaStreamAttrValue bad_ratio = set;
  bad_ratio.accessPolicyWindow.hitRatio = 2.0f;
  const int bad_ratio_rc = (int)cudaStreamSetAttribute(stream, cudaStreamAttributeAccessPolicyWindow, &bad_ratio);
  cudaStreamAttrValue cooperative = {};
  cooperative.cooperative = 1;
  const int not_a_stream_attribute_rc =
      (int)cudaStreamSetAttribute(stream, (cudaStreamAttrID)cudaLaunchAttributeCooperative, &cooperative);
  cudaGetLastError();
  CHECK(cudaStreamGetAttribute(stream, cudaStreamAttributeAccessPolicyWindow, &got));
  printf("too_large=%d bad_ratio=%d not_a_stream_attribute=%d window_kept=%d\n", too_large_rc, bad_ratio_rc,
         not_a_stream_attribute_rc, same_window(set.accessPolicyWindow, got.accessPolicyWindow));

  CHECK(cudaStreamDestroy(stream));
  CHECK(cudaStreamDestroy(copy));
  CHECK(cudaFree(d_data));
  return 0;
}
