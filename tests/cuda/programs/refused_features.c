// What a job sees of the features tally refuses on every backend (GPUDirect
// RDMA, DMA-BUF, NVLink multicast, fabric handles): the device attributes that
// advertise them read 0, so NCCL and PyTorch take their fallback paths, and a
// DMA-BUF export of device memory answers CUDA_ERROR_NOT_SUPPORTED, as a driver
// without DMA-BUF does. Prints key=value lines; exits 0 unless the setup fails.
#include <cuda.h>
#include <stdio.h>

#include "driver_check.h"

static int attribute(CUdevice_attribute which) {
  int value = -1;
  CHECK(cuDeviceGetAttribute(&value, which, 0));
  return value;
}

int main(void) {
  setup();
  printf("dma_buf=%d\n", attribute(CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED));
  printf("gpu_direct_rdma=%d\n", attribute(CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED));
  printf("multicast=%d\n", attribute(CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED));
  printf("fabric=%d\n", attribute(CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED));
  printf("pool_handle_types=%d\n", attribute(CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES));
  printf("posix_fd=%d\n", attribute(CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED));

  CUdeviceptr buffer;
  CHECK(cuMemAlloc(&buffer, 1 << 21));
  int fd = -1;
  CUresult rc = cuMemGetHandleForAddressRange(&fd, buffer, 1 << 21, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
  printf("dma_buf_export=%d fd=%d\n", (int)rc, fd);
  // The job goes on: the refusal changed nothing.
  CHECK(cuMemsetD32(buffer, 7u, 16));
  unsigned word = 0;
  CHECK(cuMemcpyDtoH(&word, buffer + 60, sizeof word));
  printf("after=%u\n", word);
  CHECK(cuMemFree(buffer));
  return 0;
}
