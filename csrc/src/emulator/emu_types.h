// Core types of the PTX emulator: the pre-decoded instruction, operand slots,
// address-space windows, faults and the flag bits the Python lowering sets.
//
// The Python side (tally/backends/emulator/lowering.py) turns each PTX instruction into
// one `Instr`: a handler looked up by key ("add.s32", "ld.global", "shfl"...),
// operand slots, an immediate and flag bits. The bit layouts below are exported
// to Python by bindings.cpp (so there is one definition of them).
#pragma once

#include <cstdint>
#include <string>

namespace tally::emu {

constexpr int kWarpSize = 32;
using LaneMask = uint32_t;
constexpr LaneMask kFullMask = 0xffffffffu;

// ---------------------------------------------------------------- operand slots
// A slot is (bank << 30) | index. Lane l of a slot lives at
// bank_base[bank] + index * 32 + l (structure of arrays: one row of 32 lanes
// per register, so an instruction's lane loop walks contiguous memory).
// Every register value is 64 bits; narrower types use the low bits, and
// writers extend (sign for .s types, zero otherwise) so any reader can truncate.
enum Bank : uint32_t {
  kBankFrame = 0,  // registers of the current call frame (one frame per call depth)
  kBankWarp = 1,   // per-warp constants: special registers (%tid, %ctaid, ...)
  kBankConst = 2,  // program constants: immediates and resolved symbol addresses
};
constexpr uint32_t kBankShift = 30;
constexpr uint32_t kIndexMask = (1u << kBankShift) - 1;
constexpr uint32_t kNoSlot = 0xffffffffu;

// ---------------------------------------------------------------- address space
// Device allocations live in [kGlobalBase, kGlobalBase + kGlobalWindow).
// Generic addresses of .shared, .local and kernel .param data are window base
// + space address; a generic address outside those windows is global.
constexpr uint64_t kGlobalBase = 0x7f0000000000ull;
constexpr uint64_t kGlobalWindow = 1ull << 40;
constexpr uint64_t kSharedWindow = 0x7e0000000000ull;
constexpr uint64_t kLocalWindow = 0x7e0100000000ull;
constexpr uint64_t kParamWindow = 0x7e0200000000ull;
constexpr uint64_t kWindowSize = 1ull << 32;
// Function pointers (`mov.u64 %fn, func`) are kCodeWindow + the function's index in
// its module, the same in every kernel of the module (Program::function_table).
constexpr uint64_t kCodeWindow = 0x7e0300000000ull;
// Distributed shared memory (thread-block clusters): a .shared::cluster address is
// ((rank + 1) << kClusterRankShift) | offset in that block's shared memory, so a plain
// .shared::cta address (below 1 << kClusterRankShift, as .shared is at most 228 KiB)
// is also the .shared::cluster address of the block's own memory, as PTX requires.
// Generic addresses of other blocks' shared memory are kSharedWindow + that address.
constexpr uint32_t kClusterRankShift = 24;
constexpr uint64_t kClusterOffsetMask = (1ull << kClusterRankShift) - 1;
constexpr uint32_t kMaxClusterBlocks = 16;   // the non-portable maximum on Hopper

// ---------------------------------------------------------------- CUresult codes
enum ErrorCode : int {
  kSuccess = 0,
  kInvalidValue = 1,
  kOutOfMemory = 2,
  kAlreadyMapped = 208,  // CUDA_ERROR_ALREADY_MAPPED
  kIllegalAddress = 700,
  kLaunchTimeout = 702,
  kAssert = 710,         // CUDA_ERROR_ASSERT: a device-side assert failed
  kIllegalInstruction = 715,
  kMisalignedAddress = 716,
  kLaunchFailed = 719,
  kNotSupported = 801,   // CUDA_ERROR_NOT_SUPPORTED
};

// Thrown by a handler when one lane faults; the scheduler adds which thread,
// block and PTX line, and ends the launch with `code`.
struct Fault {
  int code;
  std::string message;
  int lane = -1;
};

// ---------------------------------------------------------------- control classes
// How the scheduler treats an instruction. kNone: the handler runs for the
// executing lanes and the group moves to pc + 1; the others are handled by the
// scheduler itself (scheduler.cpp) because they change which lanes run next.
enum class Control : uint8_t {
  kNone,
  kBranch,
  kBranchIndexed,  // brx.idx: op[0] = index, imm = jump table id
  kCall,           // op[0] = function pointer register for indirect calls, else target
  kReturn,
  kExit,
  kBarrier,
  kClusterBarrier,  // barrier.cluster.arrive / .wait (flag::kClusterWait)
  kWarpSync,
  kTrap,
  kWait,           // runs like kNone; if the handler sets Exec::yield, the warp's turn ends there
};

// ---------------------------------------------------------------- flag bits
namespace flag {
// rounding (bits 0-3)
constexpr uint32_t kRoundMask = 0xf;
constexpr uint32_t kRoundDefault = 0, kRn = 1, kRz = 2, kRm = 3, kRp = 4, kRni = 5, kRzi = 6, kRmi = 7,
                   kRpi = 8, kRna = 9;
constexpr uint32_t kFtz = 1u << 4;
constexpr uint32_t kSat = 1u << 5;
constexpr uint32_t kApprox = 1u << 6;
constexpr uint32_t kRelu = 1u << 7;
// comparisons (bits 8-12) for setp/set/slct
constexpr uint32_t kCmpShift = 8, kCmpMask = 0x1f;
enum Cmp : uint32_t { kEq, kNe, kLt, kLe, kGt, kGe, kLo, kLs, kHi, kHs, kEqu, kNeu, kLtu, kLeu, kGtu, kGeu, kNum, kNan };
// boolean combination (bits 13-14) and negation of the combined predicate c (bit 15)
constexpr uint32_t kBoolShift = 13, kBoolMask = 0x3;
enum BoolOp : uint32_t { kBoolNone, kBoolAnd, kBoolOr, kBoolXor };
constexpr uint32_t kNegateC = 1u << 15;
// set: destination is a float (1.0f) rather than an integer mask
constexpr uint32_t kSetFloatResult = 1u << 16;
// ld: sign-extend the loaded element into the register
constexpr uint32_t kSignExtend = 1u << 16;
// memory order of ld/st/atom (bits 17-19)
constexpr uint32_t kOrderShift = 17, kOrderMask = 0x7;
enum Order : uint32_t { kWeak, kVolatile, kRelaxed, kAcquire, kRelease, kAcqRel, kSeqCst };
// bfind .shiftamt
constexpr uint32_t kShiftAmount = 1u << 16;
// shf: left (else right), clamp (else wrap)
constexpr uint32_t kShfLeft = 1u << 16, kShfClamp = 1u << 17;
// prmt mode (bits 16-18)
constexpr uint32_t kPrmtShift = 16;
enum PrmtMode : uint32_t { kPrmtDefault, kPrmtF4e, kPrmtB4e, kPrmtRc8, kPrmtEcl, kPrmtEcr, kPrmtRc16 };
// cvt: destination type code (bits 16-19), source type code (bits 20-23)
constexpr uint32_t kDstTypeShift = 16, kSrcTypeShift = 20, kTypeMask = 0xf;
// atom/red operation (bits 16-19) and operand type code (bits 20-23)
constexpr uint32_t kAtomOpShift = 16;
enum AtomOp : uint32_t { kAtomAdd, kAtomMin, kAtomMax, kAtomInc, kAtomDec, kAtomAnd, kAtomOr, kAtomXor, kAtomExch, kAtomCas };
// shfl mode (bits 16-17)
constexpr uint32_t kShflShift = 16;
enum ShflMode : uint32_t { kShflUp, kShflDown, kShflBfly, kShflIdx };
// vote kind (bits 16-17), negated source predicate (bit 18)
constexpr uint32_t kVoteShift = 16;
enum VoteKind : uint32_t { kVoteAll, kVoteAny, kVoteUni, kVoteBallot };
constexpr uint32_t kNegateA = 1u << 18;
// match: all (else any)
constexpr uint32_t kMatchAll = 1u << 16;
// redux op (bits 16-18), signed (bit 19)
constexpr uint32_t kReduxShift = 16;
enum ReduxOp : uint32_t { kReduxAdd, kReduxMin, kReduxMax, kReduxAnd, kReduxOr, kReduxXor };
constexpr uint32_t kReduxSigned = 1u << 19;
// barrier kind (bits 16-18), negated predicate of bar.red (kNegateC)
constexpr uint32_t kBarShift = 16;
enum BarKind : uint32_t { kBarSync, kBarArrive, kBarRedPopc, kBarRedAnd, kBarRedOr };
// barrier.cluster: wait (else arrive)
constexpr uint32_t kClusterWait = 1u << 16;
// testp class (bits 16-18)
constexpr uint32_t kTestShift = 16;
enum TestClass : uint32_t { kTestFinite, kTestInfinite, kTestNumber, kTestNotANumber, kTestNormal, kTestSubnormal };
// dp4a/dp2a: a signed, b signed, dp2a takes b's high bytes
constexpr uint32_t kDotSignedA = 1u << 16, kDotSignedB = 1u << 17, kDot2High = 1u << 18;
// clock source (bits 16-17)
constexpr uint32_t kClockShift = 16;
enum ClockKind : uint32_t { kClock32, kClock64, kGlobalTimer };
}  // namespace flag

// Scalar type codes used by cvt and atom (flag fields above).
enum TypeCode : uint32_t {
  kU8, kS8, kU16, kS16, kU32, kS32, kU64, kS64, kF16, kBF16, kF32, kF64, kTypeCount
};

// Special registers the scheduler writes into the per-warp bank at block start.
// The reserved shared-memory registers (cooperative groups keep their multi-warp
// tile barriers there) describe a region after the kernel's own shared memory;
// it exists only in launches of programs that read one of them
// (Program::reserved_shared_bytes). %envreg1:%envreg2 are the address of a
// cooperative launch's grid workspace (cooperative groups' grid barrier), 0 in
// any other launch.
enum Special : uint32_t {
  kTidX, kTidY, kTidZ, kNtidX, kNtidY, kNtidZ, kCtaidX, kCtaidY, kCtaidZ,
  kNctaidX, kNctaidY, kNctaidZ, kLaneId, kWarpId, kNWarpId, kSmId, kNSmId, kGridId,
  kLanemaskEq, kLanemaskLt, kLanemaskLe, kLanemaskGt, kLanemaskGe,
  kDynamicSmemSize, kTotalSmemSize, kAggrSmemSize,
  kReservedSmemBegin, kReservedSmemEnd, kReservedSmemCap, kReservedSmemOffset0, kReservedSmemOffset1,
  // Thread-block clusters; a launch without a cluster is a grid of one-block clusters.
  kClusterIdX, kClusterIdY, kClusterIdZ, kNclusterIdX, kNclusterIdY, kNclusterIdZ,
  kClusterCtaidX, kClusterCtaidY, kClusterCtaidZ, kClusterNctaidX, kClusterNctaidY, kClusterNctaidZ,
  kClusterCtaRank, kClusterNctaRank, kIsExplicitCluster,
  kEnvreg1, kEnvreg2,
  kSpecialCount
};

// ---------------------------------------------------------------- instructions
struct Exec;
struct Instr;
using Handler = void (*)(Exec&, const Instr&, LaneMask);

struct Instr {
  Handler fn = nullptr;
  uint32_t op[8] = {kNoSlot, kNoSlot, kNoSlot, kNoSlot, kNoSlot, kNoSlot, kNoSlot, kNoSlot};
  int64_t imm = 0;        // address offset, lookup-table immediate, copy-list id ...
  int64_t imm2 = 0;
  int32_t target = -1;    // branch / call target pc
  uint32_t guard = kNoSlot;
  uint32_t flags = 0;
  Control control = Control::kNone;
  bool guard_negated = false;
  uint8_t width = 1;      // vector elements of ld/st/mov pack
  uint8_t size = 0;       // element size in bytes
  int32_t line = 0;       // PTX source line, for error messages
};

// Operand index of the membermask of a warp-synchronous instruction.
constexpr int kMemberMaskOperand = 7;

}  // namespace tally::emu
