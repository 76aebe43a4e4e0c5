// JIT-capture records (tally/jit/records.py): the PTX a JIT compiler of the job
// assembled into a cubin, found by the cubin's bytes in the cache tally-run names.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tally::client {

// Whether tally-run turned JIT capture on (it names the cache: TALLY_JIT_CAPTURE_DIR).
bool jit_capture_on();

// The record of a bare cubin image, or empty: capture is off (no
// TALLY_JIT_CAPTURE_DIR), the image is not a cubin, or no record exists. A record
// found is touched, so the cache's trimming keeps the records in use.
std::vector<uint8_t> jit_record_for(const uint8_t* image, size_t size);

// What travels to the server for an input that may be a bare cubin (a module image, a
// link input): the image followed by its record, with *record_size the record's bytes;
// empty (and *record_size 0) when jit_record_for finds none, and the image goes alone.
std::vector<uint8_t> image_with_jit_record(const uint8_t* image, size_t size, uint32_t* record_size);

// "<fnv1a64 16 hex>-<size hex>.rec", the record's file name (records.py: record_name).
std::string jit_record_name(const uint8_t* image, size_t size);

// Writes the record of `cubin` (the PTX it was assembled from, and what made it) into
// the cache, then trims the cache to its bound, as records.py's store does. Nothing is
// written (false) when capture is off, the image is not a cubin, the record is over
// the bound, or the cache cannot be written. A record of the same name is replaced.
bool jit_record_store(const uint8_t* cubin, size_t size, const char* ptx, size_t ptx_size, const char* producer);

}  // namespace tally::client
