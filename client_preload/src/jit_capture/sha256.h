// SHA-256 (FIPS 180-4), for the JIT-capture records the client writes: a record
// names its cubin by SHA-256 (tally/jit/records.py), which the server checks.
// Written here rather than taken from OpenSSL: this library is preloaded into
// every process of a job, and linking libcrypto would put one OpenSSL's symbols
// beside whatever other OpenSSL the job brings. Checked against Python's hashlib
// (tests/test_client_sha256.py).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace tally::client {

// The digest of `size` bytes at `data`, as 64 lowercase hex digits.
std::string sha256_hex(const uint8_t* data, size_t size);

}  // namespace tally::client
