#include "emulator/program.h"

namespace tally::emu {

std::unordered_map<std::string, HandlerInfo>& handler_table() {
  static std::unordered_map<std::string, HandlerInfo> table;
  return table;
}

bool Program::add(const std::string& key, const Instr& fields, const std::string& source_text) {
  auto& table = handler_table();
  auto it = table.find(key);
  if (it == table.end()) return false;
  Instr in = fields;
  in.fn = it->second.fn;
  in.control = it->second.control;
  code.push_back(in);
  text.push_back(source_text);
  return true;
}

std::string Program::validate() const {
  const uint64_t const_rows = const_bank.size() / kWarpSize;
  const uint64_t limits[3] = {frame_registers, warp_slots, const_rows};
  auto slot_ok = [&](uint32_t slot) {
    if (slot == kNoSlot) return true;
    uint32_t bank = slot >> kBankShift;
    return bank < 3 && (slot & kIndexMask) < limits[bank];
  };
  auto pc_ok = [&](int64_t pc) { return pc >= 0 && pc < static_cast<int64_t>(code.size()); };
  auto where = [&](size_t pc) { return "instruction " + std::to_string(pc) + " (" + text[pc] + ")"; };
  if (code.empty() || !pc_ok(entry_pc)) return "the program has no entry instruction";
  for (size_t pc = 0; pc < code.size(); ++pc) {
    const Instr& in = code[pc];
    for (uint32_t slot : in.op) {
      if (!slot_ok(slot)) return where(pc) + " names an operand slot outside its bank";
    }
    if (!slot_ok(in.guard)) return where(pc) + " has a guard outside the register file";
    if (in.width < 1 || in.width > 4) return where(pc) + " has a vector width outside 1..4";
    switch (in.control) {
      case Control::kBranch:
        if (!pc_ok(in.target)) return where(pc) + " branches outside the program";
        break;
      case Control::kBranchIndexed:
        if (in.imm < 0 || static_cast<size_t>(in.imm) >= jump_tables.size()) return where(pc) + " has no jump table";
        for (int32_t t : jump_tables[static_cast<size_t>(in.imm)]) {
          if (!pc_ok(t)) return where(pc) + " has a jump table entry outside the program";
        }
        break;
      case Control::kCall:
        if (in.op[0] == kNoSlot && !pc_ok(in.target)) return where(pc) + " calls outside the program";
        if (in.imm < 0 || static_cast<size_t>(in.imm) >= copies.size()) return where(pc) + " has no copy list";
        break;
      default:
        break;
    }
    if (in.fn == nullptr && in.control == Control::kNone) return where(pc) + " has no handler";
  }
  for (const auto& list : copies) {
    for (const FrameCopy& c : list) {
      if (uint64_t{c.from} + c.size > local_frame_bytes || uint64_t{c.to} + c.size > local_frame_bytes) {
        return "a call copies bytes outside a call frame";
      }
    }
  }
  for (const auto& list : slot_lists) {
    for (uint32_t slot : list) {
      if (!slot_ok(slot)) return "an operand list names a slot outside its bank";
    }
  }
  for (int32_t t : function_table) {
    if (t != -1 && !pc_ok(t)) return "a function pointer leads outside the program";
  }
  return "";
}

uint32_t Program::add_constant(uint64_t value) {
  uint32_t index = static_cast<uint32_t>(const_bank.size() / kWarpSize);
  const_bank.insert(const_bank.end(), kWarpSize, value);
  return (kBankConst << kBankShift) | index;
}

}  // namespace tally::emu
