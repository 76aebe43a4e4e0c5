// Identifies our libcuda.so.1 stand-in (tally-run and tests check for it).
extern "C" __attribute__((visibility("default"))) const char* tally_client_version() { return "tally-client 0.1.0"; }
