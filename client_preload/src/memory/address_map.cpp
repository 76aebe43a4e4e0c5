#include "memory/address_map.h"

namespace tally::client {

// Constructed on first use and never destroyed: other libraries' exit handlers
// may still free memory while the process shuts down.
RangeMap<DeviceRangeKind>& device_ranges() {
  static auto* map = new RangeMap<DeviceRangeKind>();
  return *map;
}

RangeMap<PinnedRegion>& pinned_ranges() {
  static auto* map = new RangeMap<PinnedRegion>();
  return *map;
}

}  // namespace tally::client
