// CUPTI's declarations, without cupti.h: cupti.h stands in dummy structs for the
// driver's v1 types, which the client's cuda.h (driver_headers.h, with
// __CUDA_API_VERSION_INTERNAL) defines for real, and pulls in every API's parameter
// structs, which tally does not build.
#pragma once
#include "driver_headers.h"

#include <cupti_result.h>
#include <cupti_version.h>
#include <cupti_activity.h>
#include <cupti_callbacks.h>
#include <cupti_driver_cbid.h>
