// cudart's private driver interfaces. cudart (static and shared, 12 and 13) asks
// for them with cuGetExportTable(&table, &uuid) and calls their slots directly.
// A table is an array of pointers; most start with their own size in bytes. What
// each slot does was measured (DESIGN.md, "Interception") or documented by ZLUDA's
// reverse engineering; each table is in its own file.
#pragma once
#include <cstddef>

namespace tally::client::export_tables {

using Table = const void* const*;

Table runtime_interface();       // 6bd5fb6c-5bf4-e74a-8987-d93912fd9df9
Table tools_runtime_hooks();     // a094798c-2e74-2e74-93f2-0800200c0a66
Table tools_tls();               // 42d85a81-23f6-cb47-8298-f6e78a3aecdc
Table context_local_storage();   // c693336e-1121-df11-a8c3-68f355d89593
Table context_checks();          // 263e8860-7cd2-6143-92f6-bbd5006dfa7e
Table integrity_check();         // d4082055-bde6-704b-8d34-ba123c66e1f2
Table tools_context();           // 21318c60-9714-3248-8ca6-41ff7324c8f2 (cudart 13.5 on)
Table tools_cupti();             // 7cb63f9b-9ca4-8e42-a484-beb66e6aed7f (CUPTI 13.1 on)
Table fft_kernels();             // 6e163fbe-b958-444d-835c-e182aff1991e (cuFFT 12)

}  // namespace tally::client::export_tables
