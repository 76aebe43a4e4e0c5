// Sharing a memory pool's allocation between two jobs, as CUDA's pool IPC does
// (cuda-samples' streamOrderedAllocationIPC passes the descriptor over a unix socket;
// here the importer opens it through /proc, which gives it the same file):
//   pool_sharing owner     a pool made to be shared (cudaMemHandleTypePosixFileDescriptor),
//                          1 MiB from it filled by a kernel; exports the pool (a file
//                          descriptor) and the pointer, prints pid=, fd= and data=;
//                          waits for a line on stdin, then reads back what the importer
//                          wrote (written_by_importer=1) and frees it
//   pool_sharing importer PID FD DATA   imports the pool and the pointer, checks the
//                          owner's bytes (read_owners=1), writes its own and frees
//                          (closes) the pointer; what must fail: export data altered,
//                          a descriptor that is no pool, exporting an unshared pool
// Prints key=value lines; exits 0 unless the setup itself fails.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>
#include <fcntl.h>
#include <unistd.h>

#include "runtime_check.h"

constexpr size_t kWords = 1 << 18;

__global__ void fill(unsigned* data, unsigned seed, size_t n) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) data[i] = seed + (unsigned)i;
}

static int wrong(const unsigned* device, unsigned seed) {
  unsigned* host = (unsigned*)malloc(kWords * sizeof(unsigned));
  CHECK(cudaMemcpy(host, device, kWords * sizeof(unsigned), cudaMemcpyDeviceToHost));
  int bad = 0;
  for (size_t i = 0; i < kWords; ++i) bad += host[i] != seed + (unsigned)i;
  free(host);
  return bad;
}

static cudaMemPool_t make_pool(cudaMemAllocationHandleType types) {
  cudaMemPoolProps props;
  memset(&props, 0, sizeof props);
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = types;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  cudaMemPool_t pool;
  CHECK(cudaMemPoolCreate(&pool, &props));
  return pool;
}

static int owner() {
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  cudaMemPool_t pool = make_pool(cudaMemHandleTypePosixFileDescriptor);
  unsigned* data = nullptr;
  CHECK(cudaMallocFromPoolAsync((void**)&data, kWords * sizeof(unsigned), pool, stream));
  fill<<<(kWords + 255) / 256, 256, 0, stream>>>(data, 1000, kWords);
  CHECK(cudaStreamSynchronize(stream));
  int fd = -1;
  CHECK(cudaMemPoolExportToShareableHandle(&fd, pool, cudaMemHandleTypePosixFileDescriptor, 0));
  cudaMemPoolPtrExportData export_data;
  CHECK(cudaMemPoolExportPointer(&export_data, data));
  char hex[2 * sizeof export_data + 1];
  for (size_t i = 0; i < sizeof export_data; ++i) sprintf(hex + 2 * i, "%02x", export_data.reserved[i]);
  // A pool not made to be shared cannot be exported.
  cudaMemPool_t unshared = make_pool(cudaMemHandleTypeNone);
  int unused_fd = -1;
  printf("export_unshared=%d\n",
         (int)cudaMemPoolExportToShareableHandle(&unused_fd, unshared, cudaMemHandleTypePosixFileDescriptor, 0));
  (void)cudaGetLastError();
  printf("pid=%d\nfd=%d\ndata=%s\n", (int)getpid(), fd, hex);
  fflush(stdout);
  char line[64];
  if (!fgets(line, sizeof line, stdin)) return 1;
  printf("written_by_importer=%d\n", wrong(data, 7000) == 0);
  CHECK(cudaFreeAsync(data, stream));
  CHECK(cudaStreamSynchronize(stream));
  CHECK(cudaMemPoolDestroy(pool));
  CHECK(cudaMemPoolDestroy(unshared));
  close(fd);
  return 0;
}

static int importer(int pid, int owner_fd, const char* hex) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/fd/%d", pid, owner_fd);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    perror(path);
    return 1;
  }
  cudaMemPool_t pool;
  CHECK(cudaMemPoolImportFromShareableHandle(&pool, (void*)(intptr_t)fd, cudaMemHandleTypePosixFileDescriptor, 0));
  cudaMemPoolPtrExportData data;
  for (size_t i = 0; i < sizeof data; ++i) sscanf(hex + 2 * i, "%2hhx", &data.reserved[i]);

  cudaMemPoolPtrExportData altered = data;
  altered.reserved[32] ^= 1;   // the pool's identity (bytes 32-39)
  void* refused = nullptr;
  printf("import_altered=%d\n", (int)cudaMemPoolImportPointer(&refused, pool, &altered));
  (void)cudaGetLastError();
  int not_a_pool = open("/dev/null", O_RDONLY | O_CLOEXEC);
  cudaMemPool_t bogus;
  printf("import_not_a_pool=%d\n", (int)cudaMemPoolImportFromShareableHandle(
                                       &bogus, (void*)(intptr_t)not_a_pool, cudaMemHandleTypePosixFileDescriptor, 0));
  (void)cudaGetLastError();

  unsigned* shared = nullptr;
  CHECK(cudaMemPoolImportPointer((void**)&shared, pool, &data));
  printf("read_owners=%d\n", wrong(shared, 1000) == 0);
  fill<<<(kWords + 255) / 256, 256>>>(shared, 7000, kWords);
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaFree(shared));      // an imported pointer is freed (closed) by its importer
  CHECK(cudaMemPoolDestroy(pool));
  close(fd);
  close(not_a_pool);
  printf("imported_done=1\n");
  return 0;
}

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  if (argc > 1 && strcmp(argv[1], "owner") == 0) return owner();
  if (argc > 4 && strcmp(argv[1], "importer") == 0) return importer(atoi(argv[2]), atoi(argv[3]), argv[4]);
  fprintf(stderr, "usage: pool_sharing owner | importer PID FD DATA\n");
  return 2;
}
