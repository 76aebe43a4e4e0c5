// Warp-level instructions (shfl.sync, vote.sync, match.sync, redux.sync,
// elect.sync, activemask) and the registration of control-flow keys whose
// work the scheduler does itself (bra, call, ret, exit, bar, trap).
//
// The scheduler runs a warp-synchronous handler only once every live lane of
// the membermask has arrived, with `m` = the lanes that arrived.
#include "emulator/ops_common.h"

namespace tally::emu {
namespace {

inline LaneMask member_mask(Exec& e, const Instr& in, LaneMask m) {
  if (in.op[kMemberMaskOperand] == kNoSlot) return kFullMask;
  return static_cast<LaneMask>(e.lanes(in.op[kMemberMaskOperand])[__builtin_ctz(m)]);
}

// shfl.sync.mode.b32 d[|p], a, b, c, membermask: op[0] = d, op[1] = p, op[2] = a,
// op[3] = b, op[4] = c. c packs the clamp value (bits 4-0) and segment mask (12-8).
EMU_HANDLER(h_shfl) {
  uint64_t* d = e.lanes(in.op[0]);
  uint64_t* p = in.op[1] == kNoSlot ? nullptr : e.lanes(in.op[1]);
  const uint64_t* a = e.lanes(in.op[2]);
  const uint64_t* b = e.lanes(in.op[3]);
  const uint64_t* c = e.lanes(in.op[4]);
  uint32_t mode = (in.flags >> flag::kShflShift) & 0x3;
  uint64_t source[kWarpSize];
  for (int l = 0; l < kWarpSize; ++l) source[l] = static_cast<uint32_t>(a[l]);
  for_lanes(m, [&](int l) {
    int bval = static_cast<int>(b[l] & 31);
    int cval = static_cast<int>(c[l] & 31);
    int segmask = static_cast<int>((c[l] >> 8) & 31);
    int max_lane = (l & segmask) | (cval & ~segmask);
    int min_lane = l & segmask;
    int j;
    bool ok;
    switch (mode) {
      case flag::kShflUp: j = l - bval; ok = j >= max_lane; break;
      case flag::kShflDown: j = l + bval; ok = j <= max_lane; break;
      case flag::kShflBfly: j = l ^ bval; ok = j <= max_lane; break;
      default: j = min_lane | (bval & ~segmask); ok = j <= max_lane; break;
    }
    if (!ok) j = l;
    d[l] = source[j];
    if (p) p[l] = ok;
  });
}

// vote.sync.{all,any,uni}.pred d, {!}a, membermask; vote.sync.ballot.b32 d, {!}a, membermask
EMU_HANDLER(h_vote) {
  uint64_t* d = e.lanes(in.op[0]);
  const uint64_t* a = e.lanes(in.op[1]);
  bool negate = in.flags & flag::kNegateA;
  LaneMask voters = m & member_mask(e, in, m);
  LaneMask ballot = 0;
  for_lanes(voters, [&](int l) {
    if ((a[l] != 0) != negate) ballot |= 1u << l;
  });
  uint64_t r;
  switch ((in.flags >> flag::kVoteShift) & 0x3) {
    case flag::kVoteAll: r = ballot == voters; break;
    case flag::kVoteAny: r = ballot != 0; break;
    case flag::kVoteUni: r = ballot == 0 || ballot == voters; break;
    default: r = ballot; break;
  }
  for_lanes(m, [&](int l) { d[l] = r; });
}

// match.any.sync.bN d, a, membermask / match.all.sync.bN d[|p], a, membermask: op[0] = d,
// op[1] = p, op[2] = a.
EMU_HANDLER(h_match) {
  uint64_t* d = e.lanes(in.op[0]);
  uint64_t* p = in.op[1] == kNoSlot ? nullptr : e.lanes(in.op[1]);
  const uint64_t* a = e.lanes(in.op[2]);
  uint64_t mask = in.size >= 8 ? ~0ull : 0xffffffffull;
  LaneMask members = m & member_mask(e, in, m);
  if (in.flags & flag::kMatchAll) {
    bool all = true;
    uint64_t first = a[__builtin_ctz(members ? members : m)] & mask;
    for_lanes(members, [&](int l) { all &= (a[l] & mask) == first; });
    for_lanes(m, [&](int l) {
      d[l] = all ? members : 0;
      if (p) p[l] = all;
    });
    return;
  }
  uint64_t values[kWarpSize];
  for (int l = 0; l < kWarpSize; ++l) values[l] = a[l] & mask;
  for_lanes(m, [&](int l) {
    LaneMask same = 0;
    for_lanes(members, [&](int k) {
      if (values[k] == values[l]) same |= 1u << k;
    });
    d[l] = same;
  });
}

// redux.sync.op.type d, a, membermask: op[0] = d, op[2] = a.
EMU_HANDLER(h_redux) {
  uint64_t* d = e.lanes(in.op[0]);
  const uint64_t* a = e.lanes(in.op[2]);
  LaneMask members = m & member_mask(e, in, m);
  uint32_t op = (in.flags >> flag::kReduxShift) & 0x7;
  bool is_signed = in.flags & flag::kReduxSigned;
  uint32_t acc = 0;
  bool first = true;
  for_lanes(members, [&](int l) {
    uint32_t v = static_cast<uint32_t>(a[l]);
    if (first) {
      acc = v;
      first = false;
      return;
    }
    switch (op) {
      case flag::kReduxAdd: acc += v; break;
      case flag::kReduxMin:
        acc = is_signed ? static_cast<uint32_t>(std::min(static_cast<int32_t>(acc), static_cast<int32_t>(v))) : std::min(acc, v);
        break;
      case flag::kReduxMax:
        acc = is_signed ? static_cast<uint32_t>(std::max(static_cast<int32_t>(acc), static_cast<int32_t>(v))) : std::max(acc, v);
        break;
      case flag::kReduxAnd: acc &= v; break;
      case flag::kReduxOr: acc |= v; break;
      default: acc ^= v; break;
    }
  });
  uint64_t r = is_signed ? put<int32_t>(static_cast<int32_t>(acc)) : acc;
  for_lanes(m, [&](int l) { d[l] = r; });
}

// elect.sync d|p, membermask: op[0] = d (the leader's lane id, or none), op[1] = p.
EMU_HANDLER(h_elect) {
  LaneMask members = m & member_mask(e, in, m);
  int leader = members ? __builtin_ctz(members) : -1;
  uint64_t* d = in.op[0] == kNoSlot ? nullptr : e.lanes(in.op[0]);
  uint64_t* p = in.op[1] == kNoSlot ? nullptr : e.lanes(in.op[1]);
  for_lanes(m, [&](int l) {
    if (d) d[l] = static_cast<uint32_t>(leader);
    if (p) p[l] = l == leader;
  });
}

EMU_HANDLER(h_activemask) {
  uint64_t* d = e.lanes(in.op[0]);
  for_lanes(m, [&](int l) { d[l] = m; });
}

// Copies the callee's return parameters (frame depth + 1) into the caller's
// variables after a call returned; imm names the copy list.
EMU_HANDLER(h_retcopy) {
  Warp& w = *e.warp;
  uint32_t F = e.launch->prog.local_frame_bytes;
  if (static_cast<size_t>(in.imm) >= e.launch->prog.copies.size()) fault(kLaunchFailed, "retcopy without a copy list", -1);
  const auto& copies = e.launch->prog.copies[static_cast<size_t>(in.imm)];
  for_lanes(m, [&](int l) {
    uint8_t* base = w.local.data() + l * w.local_stride;
    for (const FrameCopy& c : copies) std::memcpy(base + e.depth * F + c.to, base + (e.depth + 1) * F + c.from, c.size);
  });
}

#define CONTROL(key, fn, control) {key, HandlerInfo{fn, Control::control}}

const HandlerRegistrar registrar{
    CONTROL("shfl", h_shfl, kWarpSync), CONTROL("vote", h_vote, kWarpSync), CONTROL("match", h_match, kWarpSync),
    CONTROL("redux", h_redux, kWarpSync), CONTROL("elect", h_elect, kWarpSync),
    CONTROL("bar.warp.sync", nullptr, kWarpSync), EMU_ENTRY("activemask", h_activemask),
    EMU_ENTRY("retcopy", h_retcopy),
    CONTROL("bra", nullptr, kBranch), CONTROL("brx.idx", nullptr, kBranchIndexed), CONTROL("call", nullptr, kCall), CONTROL("ret", nullptr, kReturn),
    CONTROL("exit", nullptr, kExit), CONTROL("bar", nullptr, kBarrier), CONTROL("trap", nullptr, kTrap),
    CONTROL("bar.cluster", nullptr, kClusterBarrier),
};

}  // namespace
}  // namespace tally::emu
