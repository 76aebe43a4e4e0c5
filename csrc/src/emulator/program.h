// A lowered kernel: the pre-decoded instruction array the scheduler runs, and
// the facts about its frames, special registers and memory it needs.
//
// Instruction handlers register themselves by key (`HandlerRegistrar` in each
// ops_*.cpp); the Python lowering names the key of each instruction and
// Program::add resolves it once, so the hot loop calls a function pointer.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "emulator/emu_types.h"

namespace tally::emu {

struct HandlerInfo {
  Handler fn;
  Control control;
};

std::unordered_map<std::string, HandlerInfo>& handler_table();

struct HandlerRegistrar {
  HandlerRegistrar(std::initializer_list<std::pair<const char*, HandlerInfo>> entries) {
    for (auto& [key, info] : entries) handler_table()[key] = info;
  }
};

// Bytes copied between call frames: caller's outgoing .param variables to the
// callee's parameters (at a call), callee's return parameters to the caller's
// (after the return). Offsets are within a frame of local memory.
struct FrameCopy {
  uint32_t from;
  uint32_t to;
  uint32_t size;
};

struct Program {
  std::string name;
  std::vector<Instr> code;
  std::vector<std::string> text;        // PTX of each instruction, for messages
  std::vector<uint64_t> const_bank;     // constants, each expanded to 32 lanes
  std::vector<std::pair<uint32_t, Special>> specials;  // warp-bank slot -> special register
  std::vector<std::vector<FrameCopy>> copies;          // referenced by call / retcopy imm
  std::vector<std::vector<int32_t>> jump_tables;       // brx.idx targets, referenced by imm
  // Operand slots of instructions naming more registers than Instr::op holds
  // (mma.sync, wgmma.mma_async: up to 131), referenced by imm.
  std::vector<std::vector<uint32_t>> slot_lists;
  std::vector<int32_t> function_table;                 // function pointer index -> pc (-1: absent)
  // Parameter bytes of each module function a kernel may launch (CUDA dynamic
  // parallelism), by function index: -1 for one that is not a kernel.
  std::vector<int32_t> kernel_param_bytes;
  uint32_t frame_registers = 0;   // register slots per call frame (max over functions)
  uint32_t warp_slots = 0;        // size of the per-warp bank
  uint32_t local_frame_bytes = 0; // local memory per call frame (max over functions)
  uint32_t static_shared_bytes = 0;
  uint32_t dynamic_shared_align = 16;  // where `extern .shared` arrays start
  uint32_t reserved_shared_bytes = 0;  // the reserved region (0: the kernel never reads its registers)
  uint32_t param_bytes = 0;
  int32_t entry_pc = 0;
  uint32_t max_call_depth = 64;

  // Appends one instruction; returns false (and leaves the program unchanged)
  // if no handler is registered under `key`.
  bool add(const std::string& key, const Instr& fields, const std::string& source_text);
  uint32_t add_constant(uint64_t value);

  // Checks what the interpreter trusts (operand slots inside their banks, branch and
  // call targets, copy lists inside a frame, vector widths): "" if sound, else what
  // is wrong. run_launch refuses a program that fails it rather than read out of bounds.
  std::string validate() const;
};

}  // namespace tally::emu
