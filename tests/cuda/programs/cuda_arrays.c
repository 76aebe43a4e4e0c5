// CUDA arrays as tally models them (linear device memory behind a handle): 1-D, 2-D
// and 3-D arrays created and described, filled and read back through every copy form
// (the 1-D ones, CUDA_MEMCPY2D and CUDA_MEMCPY3D with array sides, array to array),
// and the refusals CUDA makes. Prints key=value lines.
#include <stdbool.h>
#include <string.h>

#include "driver_check.h"

enum { W = 64, H = 8, D = 3 };

int main(void) {
  setup();
  // Refused descriptors: none filled, zero width, three channels, a video format.
  CUDA_ARRAY_DESCRIPTOR bad = {0};
  CUarray arr = NULL;
  int unfilled = (int)cuArrayCreate(&arr, &bad);
  bad.Format = CU_AD_FORMAT_FLOAT;
  bad.NumChannels = 3;
  bad.Width = 4;
  int three_channels = (int)cuArrayCreate(&arr, &bad);
  bad.NumChannels = 1;
  bad.Format = CU_AD_FORMAT_NV12;
  int video = (int)cuArrayCreate(&arr, &bad);
  printf("refused=%d,%d,%d\n", unfilled, three_channels, video);

  size_t free_before = 0, free_after = 0, total = 0;
  CHECK(cuMemGetInfo(&free_before, &total));
  // A 2-D array of floats: filled from the host in one 1-D copy, read back by rows.
  CUDA_ARRAY_DESCRIPTOR desc = {.Width = W, .Height = H, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1};
  CHECK(cuArrayCreate(&arr, &desc));
  CUDA_ARRAY_DESCRIPTOR back = {0};
  CHECK(cuArrayGetDescriptor(&back, arr));
  printf("descriptor=%zu,%zu,%d,%u\n", back.Width, back.Height, (int)back.Format, back.NumChannels);
  float host[W * H], out[W * H];
  for (int i = 0; i < W * H; ++i) host[i] = (float)i;
  CHECK(cuMemcpyHtoA(arr, 0, host, sizeof host));
  memset(out, 0, sizeof out);
  CHECK(cuMemcpyAtoH(out, arr, 0, sizeof out));
  printf("linear_round_trip=%d\n", memcmp(host, out, sizeof host) == 0);
  printf("past_the_end=%d\n", (int)cuMemcpyHtoA(arr, 4, host, sizeof host));

  // A 2-D copy of a 16 x 4 texel window at (8, 2) into device memory, then to the host.
  CUdeviceptr window;
  CHECK(cuMemAlloc(&window, 16 * 4 * sizeof(float)));
  CUDA_MEMCPY2D c2 = {0};
  c2.srcMemoryType = CU_MEMORYTYPE_ARRAY;
  c2.srcArray = arr;
  c2.srcXInBytes = 8 * sizeof(float);
  c2.srcY = 2;
  c2.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  c2.dstDevice = window;
  c2.dstPitch = 16 * sizeof(float);
  c2.WidthInBytes = 16 * sizeof(float);
  c2.Height = 4;
  CHECK(cuMemcpy2D(&c2));
  float got[16 * 4];
  CHECK(cuMemcpyDtoH(got, window, sizeof got));
  int window_good = 0;
  for (int y = 0; y < 4; ++y)
    for (int x = 0; x < 16; ++x) window_good += got[y * 16 + x] == host[(y + 2) * W + x + 8];
  printf("window_good=%d of %d\n", window_good, 16 * 4);

  // Array to array, device to array and back.
  CUarray twin;
  CHECK(cuArrayCreate(&twin, &desc));
  CHECK(cuMemcpyAtoA(twin, 0, arr, 0, sizeof host));
  CUdeviceptr flat;
  CHECK(cuMemAlloc(&flat, sizeof host));
  CHECK(cuMemcpyAtoD(flat, twin, 0, sizeof host));
  CHECK(cuMemsetD32(flat, 0x3f800000u, 16));   // 1.0f into the first 16 texels
  CHECK(cuMemcpyDtoA(twin, 0, flat, sizeof host));
  memset(out, 0, sizeof out);
  CHECK(cuMemcpyAtoH(out, twin, 0, sizeof out));
  int twin_good = 0;
  for (int i = 0; i < W * H; ++i) twin_good += out[i] == (i < 16 ? 1.0f : host[i]);
  printf("twin_good=%d of %d\n", twin_good, W * H);

  // A 3-D array of uchar4 through CUDA_MEMCPY3D from pitched host memory and back.
  CUDA_ARRAY3D_DESCRIPTOR d3 = {.Width = 16, .Height = 4, .Depth = D, .Format = CU_AD_FORMAT_UNSIGNED_INT8,
                                .NumChannels = 4, .Flags = CUDA_ARRAY3D_SURFACE_LDST};
  CUarray vol;
  CHECK(cuArray3DCreate(&vol, &d3));
  CUDA_ARRAY3D_DESCRIPTOR d3_back = {0};
  CHECK(cuArray3DGetDescriptor(&d3_back, vol));
  CUDA_ARRAY_DESCRIPTOR flat_desc;
  printf("descriptor3d=%zu,%zu,%zu,%u flat_descriptor_of_3d=%d\n", d3_back.Width, d3_back.Height, d3_back.Depth,
         d3_back.Flags, (int)cuArrayGetDescriptor(&flat_desc, vol));
  enum { PITCH = 16 * 4 + 16 };   // padded host rows
  static unsigned char src[PITCH * 4 * D], dst[PITCH * 4 * D];
  for (size_t i = 0; i < sizeof src; ++i) src[i] = (unsigned char)(i * 7);
  CUDA_MEMCPY3D c3 = {0};
  c3.srcMemoryType = CU_MEMORYTYPE_HOST;
  c3.srcHost = src;
  c3.srcPitch = PITCH;
  c3.srcHeight = 4;
  c3.dstMemoryType = CU_MEMORYTYPE_ARRAY;
  c3.dstArray = vol;
  c3.WidthInBytes = 16 * 4;
  c3.Height = 4;
  c3.Depth = D;
  CHECK(cuMemcpy3D(&c3));
  CUDA_MEMCPY3D r3 = {0};
  r3.srcMemoryType = CU_MEMORYTYPE_ARRAY;
  r3.srcArray = vol;
  r3.dstMemoryType = CU_MEMORYTYPE_HOST;
  r3.dstHost = dst;
  r3.dstPitch = PITCH;
  r3.dstHeight = 4;
  r3.WidthInBytes = 16 * 4;
  r3.Height = 4;
  r3.Depth = D;
  CHECK(cuMemcpy3D(&r3));
  int vol_good = 0;
  for (int z = 0; z < D; ++z)
    for (int y = 0; y < 4; ++y)
      for (int x = 0; x < 16 * 4; ++x) {
        size_t i = ((size_t)z * 4 + y) * PITCH + x;
        vol_good += dst[i] == src[i];
      }
  printf("volume_good=%d of %d\n", vol_good, D * 4 * 16 * 4);

  CHECK(cuArrayDestroy(vol));
  CHECK(cuArrayDestroy(twin));
  CHECK(cuArrayDestroy(arr));
  CHECK(cuMemFree(window));
  CHECK(cuMemFree(flat));
  CHECK(cuMemGetInfo(&free_after, &total));
  printf("memory_back=%d\n", free_after == free_before);
  printf("destroy_twice=%d copy_after_destroy=%d\n", (int)cuArrayDestroy(arr),
         (int)cuMemcpyHtoA(arr, 0, host, 4));
  return 0;
}
