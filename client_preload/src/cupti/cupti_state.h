// tally's CUPTI: the profiling interface a job gets under tally-run.
//
// NVIDIA's CUPTI works through the driver's private tool interfaces: asked for its
// activity API, CUPTI 13.0 fetches some thirty export tables (2c8e0ad8-..., then
// fc58ac1a-..., b10541e1-... and on) whose meaning is the driver's own, so against
// tally it cannot start (docs/cupti.md). tally is the job's driver, and the client
// sees every launch, copy and memset the job makes, so the client answers the CUPTI
// calls profilers make itself: the library that tally-run preloads defines the
// cupti* functions PyTorch (Kineto) and nvcc-built tools link against, and they
// win over libcupti.so's. What it records is measured, never invented: kernel,
// memcpy and memset records carry device times from a pair of timing events the
// client records around the work on the work's stream; driver records carry the host
// time of the launch call. What it cannot record it refuses with a logged reason.
//
// This file: the activity API's process-wide state (enabled kinds, the job's
// buffer and timestamp callbacks, the buffer being filled).
#pragma once
#include "cupti/cupti_headers.h"

#include <cstddef>
#include <cstdint>

namespace tally::client::cupti {

// Whether records of `kind` are being collected (one atomic load).
bool kind_enabled(CUpti_ActivityKind kind);
// Whether any kind tied to device work (kernels, copies, memsets, the driver
// records and external correlation of their calls) is enabled.
bool device_work_enabled();
CUptiResult set_kind_enabled(CUpti_ActivityKind kind, bool enabled);

// The job's clock if it registered one (cuptiActivityRegisterTimestampCallback),
// else CLOCK_REALTIME in nanoseconds.
uint64_t timestamp();
void set_timestamp_callback(CUpti_TimestampCallbackFunc callback);
// CLOCK_REALTIME in nanoseconds, and whether timestamp() is the job's own clock,
// whose unit need not be nanoseconds (Kineto's counts CPU timestamp-counter ticks).
uint64_t realtime_ns();
bool job_clock();

// CUPTI's correlation ids: one per recorded API call, starting at 1.
uint32_t next_correlation_id();

// Writes a finished record (a CUpti_Activity* struct of `size` bytes) into the
// job's current buffer, asking for one first if none is held.
void queue_record(const void* record, size_t size);
// Asks the job for a buffer now, if none is held (when a kind is enabled).
void hold_buffer();
// The size of the record tally writes for `kind` (0: tally writes none).
size_t record_size(CUpti_ActivityKind kind);
// How far apart such records lie in a buffer: the size padded to 8 bytes.
size_t record_stride(CUpti_ActivityKind kind);

CUptiResult register_buffer_callbacks(CUpti_BuffersCallbackRequestFunc request,
                                      CUpti_BuffersCallbackCompleteFunc complete);
// Resolves finished device work (all of it, waiting, when `forced`) and hands the
// current buffer back to the job.
CUptiResult flush(bool forced);
// Records lost because the job's buffer callback gave no usable buffer.
size_t dropped_records();

// Forgets every enabled kind and callback (cuptiFinalize), after a forced flush.
void finalize();

}  // namespace tally::client::cupti
