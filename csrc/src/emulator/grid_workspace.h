// A cooperative launch's grid workspace: the device memory cooperative groups'
// grid.sync() synchronizes through. Compiled code finds it at the 64-bit address
// %envreg1:%envreg2 (cooperative_groups/details/driver_abi.h: struct
// grid_workspace { unsigned wsSize; unsigned barrier; }) and traps when it is 0,
// as in a launch that was not cooperative. Each block adds to `barrier` so that
// the top bit flips once all have arrived, whatever the value it starts from, so
// a fresh, zeroed workspace per launch is all it needs.
#pragma once

#include <cstdint>

#include "emulator/memory.h"

namespace tally::emu {

class GridWorkspace {
 public:
  explicit GridWorkspace(DeviceMemory& memory) : memory_(memory) {}
  GridWorkspace(const GridWorkspace&) = delete;
  GridWorkspace& operator=(const GridWorkspace&) = delete;
  ~GridWorkspace() {
    if (address_ == 0) return;
    try {
      memory_.release(address_);
    } catch (MemoryError&) {  // the memory went with its device (reset): nothing left to free
    }
  }

  // Allocates and initializes it; its address. Throws MemoryError when the device is full.
  uint64_t create() {
    const uint32_t bytes[2] = {sizeof bytes, 0};  // wsSize, barrier
    address_ = memory_.allocate(sizeof bytes);
    memory_.write(address_, bytes, sizeof bytes);
    return address_;
  }

 private:
  DeviceMemory& memory_;
  uint64_t address_ = 0;
};

}  // namespace tally::emu
