"""NVRTC through cuda-bindings, as cuda-python's examples use it: a kernel compiled
for the device's own architecture (-arch=sm_XX), its cubin loaded with cuModuleLoadData
and launched over 4096 floats, the results checked on the host. Prints load=<CUresult>,
then checked=<n> bad=<n>."""
import numpy as np
from cuda.bindings import driver, nvrtc

SOURCE = b"""
extern "C" __global__ void scale_add(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + 0.5f * y[i];
}
"""


def ok(result):
    err, *rest = result
    assert int(err) == 0, err
    return rest[0] if len(rest) == 1 else rest


ok(driver.cuInit(0))
dev = ok(driver.cuDeviceGet(0))
attr = driver.CUdevice_attribute
major = ok(driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev))
minor = ok(driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev))
prog = ok(nvrtc.nvrtcCreateProgram(SOURCE, b"scale_add.cu", 0, [], []))
options = [f"-arch=sm_{major}{minor}".encode()]
ok(nvrtc.nvrtcCompileProgram(prog, len(options), options))
cubin = b" " * ok(nvrtc.nvrtcGetCUBINSize(prog))
ok(nvrtc.nvrtcGetCUBIN(prog, cubin))
ctx = ok(driver.cuDevicePrimaryCtxRetain(dev))
ok(driver.cuCtxSetCurrent(ctx))
err, module = driver.cuModuleLoadData(cubin)
print(f"load={int(err)}", flush=True)
if int(err) == 0:
    kernel = ok(driver.cuModuleGetFunction(module, b"scale_add"))
    n = 4096
    # small integers: every product and sum is exact, fused (fma) or not
    x = (np.arange(n) % 100).astype(np.float32)
    y = (np.arange(n) % 64 - 32).astype(np.float32)
    dx, dy = ok(driver.cuMemAlloc(x.nbytes)), ok(driver.cuMemAlloc(y.nbytes))
    ok(driver.cuMemcpyHtoD(dx, x.ctypes.data, x.nbytes))
    ok(driver.cuMemcpyHtoD(dy, y.ctypes.data, y.nbytes))
    args = (np.array([1.5], dtype=np.float32), np.array([int(dx)], dtype=np.uint64),
            np.array([int(dy)], dtype=np.uint64), np.array([n], dtype=np.int32))
    params = np.array([a.ctypes.data for a in args], dtype=np.uint64)
    ok(driver.cuLaunchKernel(kernel, n // 256, 1, 1, 256, 1, 1, 0, 0, params.ctypes.data, 0))
    out = np.empty_like(y)
    ok(driver.cuMemcpyDtoH(out.ctypes.data, dy, out.nbytes))
    want = np.float32(1.5) * x + np.float32(0.5) * y
    print(f"checked={n} bad={int(np.count_nonzero(out != want))}")
