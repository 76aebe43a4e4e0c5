// Tools TLS (42d85a81-...): cudart fetches it and does not call into it, but a
// process without it aborts before main (others' observation); a sized table with
// no functions is enough.
#include "export_tables/export_tables.h"
#include "export_tables/unknown_slot.h"

namespace tally::client::export_tables {
namespace {

constexpr char kName[] = "tools TLS";

}  // namespace

Table tools_tls() {
  static const PaddedTable<kName> table(PaddedTable<kName>::kSizeHeader, {});
  return table.slots();
}

}  // namespace tally::client::export_tables
