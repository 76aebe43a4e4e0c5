// The CUDA driver API as the driver itself declares it. __CUDA_API_VERSION_INTERNAL
// makes cuda.h declare every exported symbol under its real name (cuMemAlloc and
// cuMemAlloc_v2, cuLaunchKernel and cuLaunchKernel_ptsz, ...) and leaves no renaming
// macro behind, and makes cudaTypedefs.h declare the legacy PFN typedefs too.
// Include this instead of <cuda.h> everywhere in the client, so every translation
// unit sees the same declarations.
#pragma once
#ifndef __CUDA_API_VERSION_INTERNAL
#define __CUDA_API_VERSION_INTERNAL 1
#endif
#include <cuda.h>
#include <cudaProfiler.h>
#include <cudaTypedefs.h>
#include <cudaProfilerTypedefs.h>
