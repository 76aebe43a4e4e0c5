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

uint32_t Program::add_constant(uint64_t value) {
  uint32_t index = static_cast<uint32_t>(const_bank.size() / kWarpSize);
  const_bank.insert(const_bank.end(), kWarpSize, value);
  return (kBankConst << kBankShift) | index;
}

}  // namespace tally::emu
