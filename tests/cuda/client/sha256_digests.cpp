// The client's SHA-256 (client_preload/src/jit_capture/sha256.cpp) over prefixes of
// a file: sha256_digests FILE LEN... prints "<len> <digest>" for each LEN.
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "jit_capture/sha256.h"

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  FILE* f = std::fopen(argv[1], "rb");
  if (f == nullptr) return 1;
  std::vector<uint8_t> data;
  for (int c; (c = std::fgetc(f)) != EOF;) data.push_back(static_cast<uint8_t>(c));
  std::fclose(f);
  for (int i = 2; i < argc; ++i) {
    const size_t n = std::strtoull(argv[i], nullptr, 10);
    if (n > data.size()) return 1;
    std::printf("%zu %s\n", n, tally::client::sha256_hex(data.data(), n).c_str());
  }
  return 0;
}
