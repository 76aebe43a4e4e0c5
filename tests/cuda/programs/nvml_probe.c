/* What a job's NVML says under tally-run (tally/lib/libnvidia-ml.so.1, found on
 * LD_LIBRARY_PATH as a program finds NVIDIA's), next to what the driver API says,
 * and whether the NVIDIA device files exist for it. Prints key=value lines. */
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

typedef int (*Init)(void);
typedef int (*Count)(unsigned*);
typedef int (*Handle)(unsigned, void**);
typedef int (*Text)(void*, char*, unsigned);
typedef int (*Capability)(void*, int*, int*);
typedef int (*SystemText)(char*, unsigned);
typedef int (*SystemInt)(int*);

int main(void) {
  void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW);
  if (nvml == NULL) {
    printf("nvml_loaded=0 (%s)\n", dlerror());
    return 1;
  }
  Init init = (Init)dlsym(nvml, "nvmlInit_v2");
  Count count = (Count)dlsym(nvml, "nvmlDeviceGetCount_v2");
  Handle handle = (Handle)dlsym(nvml, "nvmlDeviceGetHandleByIndex_v2");
  Text name = (Text)dlsym(nvml, "nvmlDeviceGetName");
  Text uuid = (Text)dlsym(nvml, "nvmlDeviceGetUUID");
  Capability capability = (Capability)dlsym(nvml, "nvmlDeviceGetCudaComputeCapability");
  SystemText driver = (SystemText)dlsym(nvml, "nvmlSystemGetDriverVersion");
  SystemInt cuda_driver = (SystemInt)dlsym(nvml, "nvmlSystemGetCudaDriverVersion_v2");
  printf("nvml_loaded=1 init=%d\n", init());
  unsigned n = 0;
  void* dev = NULL;
  char text[96] = "", id[96] = "", version[32] = "";
  int major = -1, minor = -1, cuda_version = -1;
  /* (each call before the printf that shows it: argument evaluation has no order) */
  const int count_rc = count(&n);
  const int beyond_rc = handle(n, &dev);
  const int handle_rc = handle(0, &dev);
  printf("count_rc=%d count=%u handle_rc=%d beyond_rc=%d\n", count_rc, n, handle_rc, beyond_rc);
  const int name_rc = name(dev, text, sizeof text), uuid_rc = uuid(dev, id, sizeof id);
  const int small_rc = uuid(dev, version, 8);
  printf("name_rc=%d uuid_rc=%d small_rc=%d\n", name_rc, uuid_rc, small_rc);
  printf("nvml_name=%s\nnvml_uuid=%s\n", text, id);
  const int cc_rc = capability(dev, &major, &minor);
  printf("cc_rc=%d nvml_cc=%d.%d\n", cc_rc, major, minor);
  const int driver_rc = driver(version, sizeof version), cuda_rc = cuda_driver(&cuda_version);
  printf("driver_rc=%d nvml_driver=%s cuda_rc=%d nvml_cuda=%d\n", driver_rc, version, cuda_rc, cuda_version);

  CUdevice d;
  char cu_name[96];
  CUuuid cu_uuid;
  int cu_count = 0, cu_version = 0;
  cuInit(0);
  cuDeviceGet(&d, 0);
  cuDeviceGetCount(&cu_count);
  cuDeviceGetName(cu_name, sizeof cu_name, d);
  cuDeviceGetUuid(&cu_uuid, d);
  cuDriverGetVersion(&cu_version);
  const unsigned char* b = (const unsigned char*)cu_uuid.bytes;
  char expected[96];
  snprintf(expected, sizeof expected, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
           b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  printf("same_count=%d same_name=%d same_uuid=%d same_cuda=%d\n", cu_count == (int)n, strcmp(cu_name, text) == 0,
         strcmp(expected, id) == 0, cu_version == cuda_version);
  /* by PCI bus id, in CUDA's form and NVML's (8 hex digits of domain), and one that is no device */
  typedef int (*ByBus)(const char*, void**);
  typedef int (*Fabric)(void*, void*);
  ByBus by_bus = (ByBus)dlsym(nvml, "nvmlDeviceGetHandleByPciBusId_v2");
  Fabric fabric = (Fabric)dlsym(nvml, "nvmlDeviceGetGpuFabricInfoV");
  char bus_id[32] = {0}, long_id[40];
  void *by_cuda_form = NULL, *by_nvml_form = NULL, *first = NULL, *nowhere = NULL;
  unsigned domain = 0, bus = 0, slot = 0, fn = 0;
  cuDeviceGetPCIBusId(bus_id, sizeof bus_id, d);
  sscanf(bus_id, "%x:%x:%x.%x", &domain, &bus, &slot, &fn);
  snprintf(long_id, sizeof long_id, "%08X:%02X:%02X.%X", domain, bus, slot, fn);
  handle(0, &first);
  int bus_rc = by_bus ? by_bus(bus_id, &by_cuda_form) : -1;
  int long_rc = by_bus ? by_bus(long_id, &by_nvml_form) : -1;
  int nowhere_rc = by_bus ? by_bus("0000:ff:1f.7", &nowhere) : -1;
  char fabric_info[512];
  int fabric_rc = fabric ? fabric(first, fabric_info) : -1;
  printf("bus_rc=%d long_rc=%d same_device=%d nowhere_rc=%d fabric_rc=%d\n", bus_rc, long_rc,
         by_cuda_form == first && by_nvml_form == first, nowhere_rc, fabric_rc);
  printf("nvidiactl=%d nvidia0=%d nvidia1=%d\n", access("/dev/nvidiactl", F_OK) == 0, access("/dev/nvidia0", F_OK) == 0,
         access("/dev/nvidia1", F_OK) == 0);
  return 0;
}
