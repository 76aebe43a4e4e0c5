// tally._core.emulator: DeviceMemory, Program, run_launch and the constants the
// Python lowering needs (flag bits, type codes, special registers, windows).
// Long operations (launches, copies) release the GIL, so each stream's worker
// thread runs its kernel while the other streams and the server go on.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <memory>

#include "emulator/device_heap.h"
#include "emulator/exec.h"
#include "emulator/matrix_multiply.h"
#include "emulator/memory.h"
#include "emulator/program.h"
#include "emulator/stream_queue.h"
#include "emulator/tensor_map.h"
#include "emulator/texture.h"
#include "module_registry.h"

namespace py = pybind11;

namespace tally::emu {
namespace {

PyObject* memory_error_type = nullptr;

// A contiguous view of a Python buffer, released when this goes away.
class BufferView {
 public:
  BufferView(const py::object& obj, bool writable) {
    int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj.ptr(), &view_, flags) != 0) throw py::error_already_set();
  }
  ~BufferView() { PyBuffer_Release(&view_); }
  BufferView(const BufferView&) = delete;
  BufferView& operator=(const BufferView&) = delete;
  void* data() const { return view_.buf; }
  uint64_t size() const { return static_cast<uint64_t>(view_.len); }

 private:
  Py_buffer view_{};
};

// Device output as Python text; bytes that are not UTF-8 become U+FFFD.
py::str utf8(const std::string& s) {
  return py::reinterpret_steal<py::str>(PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "replace"));
}

void bind_memory(py::module_& m) {
  py::class_<DeviceMemory, std::shared_ptr<DeviceMemory>>(m, "DeviceMemory",
                                                          "Device allocations backed by lazily zeroed host memory.")
      .def(py::init<uint64_t>(), py::arg("capacity"))
      .def("allocate", &DeviceMemory::allocate, py::arg("nbytes"), py::arg("alignment") = DeviceMemory::kAlignment)
      .def("allocate_at", &DeviceMemory::allocate_at, py::arg("addr"), py::arg("nbytes"))
      // Unmapping a large allocation takes a while (~0.25 s per GiB on the VM): other
      // sessions' Python work goes on meanwhile.
      .def("free", &DeviceMemory::release, py::arg("ptr"), py::call_guard<py::gil_scoped_release>())
      .def("reserve", &DeviceMemory::reserve, py::arg("nbytes"), py::arg("alignment") = DeviceMemory::kAlignment,
           py::arg("hint") = 0)
      .def("unreserve", &DeviceMemory::unreserve, py::arg("base"))
      .def("reserve_at", &DeviceMemory::reserve_at, py::arg("addr"), py::arg("nbytes"))
      .def("create_physical", &DeviceMemory::create_physical, py::arg("nbytes"))
      .def("release_physical", &DeviceMemory::release_physical, py::arg("handle"))
      .def("read_physical", [](DeviceMemory& self, uint64_t handle, uint64_t offset, const py::object& dst) {
             BufferView view(dst, true);
             py::gil_scoped_release nogil;
             self.read_physical(handle, offset, view.data(), view.size());
           }, py::arg("handle"), py::arg("offset"), py::arg("dst"))
      .def("write_physical", [](DeviceMemory& self, uint64_t handle, uint64_t offset, const py::object& src) {
             BufferView view(src, false);
             py::gil_scoped_release nogil;
             self.write_physical(handle, offset, view.data(), view.size());
           }, py::arg("handle"), py::arg("offset"), py::arg("src"))
      .def("map", &DeviceMemory::map, py::arg("addr"), py::arg("nbytes"), py::arg("offset"), py::arg("handle"))
      .def("unmap", &DeviceMemory::unmap, py::arg("addr"), py::arg("nbytes"))
      .def("set_access", &DeviceMemory::set_access, py::arg("addr"), py::arg("nbytes"), py::arg("accessible"))
      .def("adopt_shared", &DeviceMemory::adopt_shared, py::arg("addr"), py::arg("nbytes"), py::arg("fd"),
           py::arg("charge") = true)
      .def_property_readonly("used", &DeviceMemory::used)
      .def_property_readonly("capacity", &DeviceMemory::capacity)
      .def_property_readonly("allocation_count", &DeviceMemory::allocation_count)
      .def("check", [](DeviceMemory& self, uint64_t addr, uint64_t n, const std::string& what) {
             if (n == 0) return;
             DeviceMemory::Use use(self);
             self.checked(addr, n, what.c_str());
           }, py::arg("addr"), py::arg("nbytes"), py::arg("what"),
           "Raises MemoryError(CUDA_ERROR_INVALID_VALUE, ...) unless [addr, addr+nbytes) is inside one allocation.")
      .def("write", [](DeviceMemory& self, uint64_t dst, const py::object& src) {
             BufferView view(src, false);
             py::gil_scoped_release nogil;
             DeviceMemory::Use use(self);
             self.write(dst, view.data(), view.size());
           }, py::arg("dst"), py::arg("src"))
      .def("read", [](DeviceMemory& self, const py::object& dst, uint64_t src) {
             BufferView view(dst, true);
             py::gil_scoped_release nogil;
             DeviceMemory::Use use(self);
             self.read(view.data(), src, view.size());
           }, py::arg("dst"), py::arg("src"))
      .def("copy", [](DeviceMemory& self, uint64_t dst, uint64_t src, uint64_t n) {
             py::gil_scoped_release nogil;
             DeviceMemory::Use use(self);
             self.copy(dst, src, n);
           }, py::arg("dst"), py::arg("src"), py::arg("nbytes"))
      .def("fill", [](DeviceMemory& self, uint64_t dst, uint32_t value, unsigned element_size, uint64_t count) {
             py::gil_scoped_release nogil;
             DeviceMemory::Use use(self);
             self.fill(dst, value, element_size, count);
           }, py::arg("dst"), py::arg("value"), py::arg("element_size"), py::arg("count"));
}

void bind_program(py::module_& m) {
  py::class_<Program, std::shared_ptr<Program>>(m, "Program", "A lowered kernel (see tally/backends/emulator/lowering.py).")
      .def(py::init([](const std::string& name) {
             auto p = std::make_shared<Program>();
             p->name = name;
             return p;
           }), py::arg("name"))
      .def("add", [](Program& p, const std::string& key, const std::vector<uint32_t>& ops, int64_t imm, int64_t imm2,
                     int32_t target, uint32_t guard, bool guard_negated, uint32_t flags, unsigned width,
                     unsigned size, int32_t line, const std::string& text) {
             if (ops.size() > 8) throw py::value_error("an instruction has at most 8 operand slots");
             Instr in;
             for (size_t i = 0; i < ops.size(); ++i) in.op[i] = ops[i];
             in.imm = imm;
             in.imm2 = imm2;
             in.target = target;
             in.guard = guard;
             in.guard_negated = guard_negated;
             in.flags = flags;
             in.width = static_cast<uint8_t>(width);
             in.size = static_cast<uint8_t>(size);
             in.line = line;
             return p.add(key, in, text);
           }, py::arg("key"), py::arg("ops"), py::arg("imm") = 0, py::arg("imm2") = 0, py::arg("target") = -1,
           py::arg("guard") = kNoSlot, py::arg("guard_negated") = false, py::arg("flags") = 0, py::arg("width") = 1,
           py::arg("size") = 0, py::arg("line") = 0, py::arg("text") = "",
           "Appends an instruction; False if no handler has this key.")
      .def("add_constant", &Program::add_constant, py::arg("value"))
      .def("add_special", [](Program& p, uint32_t slot, uint32_t special) {
             if (special >= kSpecialCount) throw py::value_error("unknown special register id");
             p.specials.emplace_back(slot, static_cast<Special>(special));
           }, py::arg("slot"), py::arg("special"))
      .def("add_copy_list", [](Program& p, const std::vector<std::tuple<uint32_t, uint32_t, uint32_t>>& copies) {
             std::vector<FrameCopy> list;
             for (auto& [from, to, size] : copies) list.push_back(FrameCopy{from, to, size});
             p.copies.push_back(std::move(list));
             return p.copies.size() - 1;
           }, py::arg("copies"), "(from, to, size) frame-offset triples; returns the list's id")
      .def("add_jump_table", [](Program& p, const std::vector<int32_t>& targets) {
             p.jump_tables.push_back(targets);
             return p.jump_tables.size() - 1;
           }, py::arg("targets"), "brx.idx targets (pcs); returns the table's id")
      .def("add_slot_list", [](Program& p, const std::vector<uint32_t>& slots) {
             p.slot_lists.push_back(slots);
             return p.slot_lists.size() - 1;
           }, py::arg("slots"), "operand slots of an instruction with more than op[] holds; returns the list's id")
      .def("set_jump_table", [](Program& p, size_t id, const std::vector<int32_t>& targets) {
             if (id >= p.jump_tables.size()) throw py::index_error("no jump table with that id");
             p.jump_tables[id] = targets;
           }, py::arg("id"), py::arg("targets"))
      .def("set_function_table", [](Program& p, const std::vector<int32_t>& pcs) { p.function_table = pcs; },
           py::arg("pcs"), "pc of each module function by index (-1: not in this program)")
      .def("set_kernel_param_bytes", [](Program& p, const std::vector<int32_t>& sizes) { p.kernel_param_bytes = sizes; },
           py::arg("sizes"), "parameter bytes of each module function by index (-1: not a kernel), for device launches")
      .def("patch_target", [](Program& p, size_t pc, int32_t target) {
             if (pc >= p.code.size()) throw py::index_error("no instruction at that pc");
             p.code[pc].target = target;
           }, py::arg("pc"), py::arg("target"))
      .def("__len__", [](const Program& p) { return p.code.size(); })
      .def_readonly("name", &Program::name)
      .def_readwrite("frame_registers", &Program::frame_registers)
      .def_readwrite("warp_slots", &Program::warp_slots)
      .def_readwrite("local_frame_bytes", &Program::local_frame_bytes)
      .def_readwrite("static_shared_bytes", &Program::static_shared_bytes)
      .def_readwrite("reserved_shared_bytes", &Program::reserved_shared_bytes)
      .def_readwrite("param_bytes", &Program::param_bytes)
      .def_readwrite("entry_pc", &Program::entry_pc)
      .def_readwrite("max_call_depth", &Program::max_call_depth);
  m.def("handler_keys", [] {
    std::vector<std::string> keys;
    for (auto& [k, v] : handler_table()) keys.push_back(k);
    return keys;
  }, "Every instruction key the interpreter implements.");
}

void bind_heap(py::module_& m) {
  py::class_<DeviceHeap, std::shared_ptr<DeviceHeap>>(m, "DeviceHeap",
                                                      "What kernels' malloc/free allocate from (one per job).")
      .def(py::init<std::shared_ptr<DeviceMemory>, uint64_t>(), py::arg("memory"), py::arg("nbytes"))
      .def("malloc", &DeviceHeap::malloc, py::arg("nbytes"), "A block's device address, or 0 when none fits.")
      .def("free", &DeviceHeap::free, py::arg("ptr"), "False when ptr is not a block malloc returned.")
      .def_property_readonly("base", &DeviceHeap::base)
      .def_property_readonly("size", &DeviceHeap::size)
      .def_property_readonly("used", &DeviceHeap::used)
      .def_property_readonly("live_blocks", &DeviceHeap::live_blocks);
}

void bind_launch(py::module_& m) {
  py::class_<CancelFlag, std::shared_ptr<CancelFlag>>(m, "CancelFlag", "Ends running launches when set.")
      .def(py::init<>())
      .def("set", [](CancelFlag& f) { f.value.store(true); })
      .def("is_set", [](CancelFlag& f) { return f.value.load(); });
  py::class_<LaunchResult>(m, "LaunchResult")
      .def_readonly("code", &LaunchResult::code)
      .def_readonly("message", &LaunchResult::message)
      .def_property_readonly("printf_output", [](const LaunchResult& r) { return utf8(r.printf_output); })
      .def_property_readonly("assert_output", [](const LaunchResult& r) { return utf8(r.assert_output); })
      .def_readonly("warp_steps", &LaunchResult::warp_steps)
      .def_readonly("thread_instructions", &LaunchResult::thread_instructions)
      .def_readonly("sms_used", &LaunchResult::sms_used)
      .def_readonly("max_concurrent", &LaunchResult::max_concurrent)
      .def_property_readonly("device_launches", [](const LaunchResult& r) {
        // (function index, grid, block, dynamic shared bytes, parameter buffer, stream) each
        py::list out;
        for (const DeviceLaunchRequest& d : r.device_launches) {
          out.append(py::make_tuple(d.function_index, py::make_tuple(d.grid[0], d.grid[1], d.grid[2]),
                                    py::make_tuple(d.block_dim[0], d.block_dim[1], d.block_dim[2]), d.dynamic_shared,
                                    d.params, d.stream));
        }
        return out;
      });
  m.def("run_launch", [](std::shared_ptr<Program> program, std::shared_ptr<DeviceMemory> memory, const py::bytes& params,
                         std::tuple<uint32_t, uint32_t, uint32_t> grid, std::tuple<uint32_t, uint32_t, uint32_t> block,
                         uint32_t dynamic_shared, uint32_t sm_count, uint64_t max_warp_steps, double timeout_seconds,
                         std::shared_ptr<CancelFlag> cancel, uint32_t sm_cap, std::shared_ptr<DeviceHeap> heap,
                         std::tuple<uint32_t, uint32_t, uint32_t> cluster, bool explicit_cluster, bool cooperative) {
          std::string param_bytes = params;
          LaunchConfig c;
          c.grid[0] = std::get<0>(grid);
          c.grid[1] = std::get<1>(grid);
          c.grid[2] = std::get<2>(grid);
          c.block[0] = std::get<0>(block);
          c.block[1] = std::get<1>(block);
          c.block[2] = std::get<2>(block);
          c.cluster[0] = std::get<0>(cluster);
          c.cluster[1] = std::get<1>(cluster);
          c.cluster[2] = std::get<2>(cluster);
          c.explicit_cluster = explicit_cluster;
          c.dynamic_shared = dynamic_shared;
          c.sm_count = sm_count;
          c.sm_cap = sm_cap;
          c.max_warp_steps = max_warp_steps;
          c.timeout_seconds = timeout_seconds;
          c.cancel = cancel ? &cancel->value : nullptr;
          c.heap = heap.get();   // `heap` holds it until the launch returns
          c.cooperative = cooperative;
          py::gil_scoped_release nogil;
          return run_launch(*program, *memory, param_bytes, c);
        }, py::arg("program"), py::arg("memory"), py::arg("params"), py::arg("grid"), py::arg("block"),
        py::arg("dynamic_shared") = 0, py::arg("sm_count") = 8, py::arg("max_warp_steps") = 0,
        py::arg("timeout_seconds") = 0.0, py::arg("cancel") = nullptr, py::arg("sm_cap") = 0,
        py::arg("heap") = nullptr, py::arg("cluster") = std::make_tuple(1u, 1u, 1u),
        py::arg("explicit_cluster") = false, py::arg("cooperative") = false,
        "Runs a launch to completion (GIL released) on up to sm_count workers (SMs; at most sm_cap of "
        "them when sm_cap > 0); the blocks of each cluster run together on one worker. A cooperative "
        "launch keeps all its blocks resident at once and gets a grid workspace (%envreg1:%envreg2) "
        "for cooperative groups' grid barrier. The result carries the CUresult and message of a fault "
        "and how many workers ran blocks.");
}

py::dict named(std::initializer_list<std::pair<const char*, uint32_t>> items) {
  py::dict d;
  for (auto& [name, value] : items) d[name] = value;
  return d;
}

void bind_constants(py::module_& m) {
  py::dict flags;
  flags["ROUND"] = named({{"rn", flag::kRn}, {"rz", flag::kRz}, {"rm", flag::kRm}, {"rp", flag::kRp}, {"rni", flag::kRni}, {"rzi", flag::kRzi}, {"rmi", flag::kRmi}, {"rpi", flag::kRpi}, {"rna", flag::kRna}});
  flags["FTZ"] = flag::kFtz;
  flags["SAT"] = flag::kSat;
  flags["APPROX"] = flag::kApprox;
  flags["RELU"] = flag::kRelu;
  flags["CMP_SHIFT"] = flag::kCmpShift;
  flags["CMP"] = named({{"eq", flag::kEq}, {"ne", flag::kNe}, {"lt", flag::kLt}, {"le", flag::kLe}, {"gt", flag::kGt}, {"ge", flag::kGe}, {"lo", flag::kLo}, {"ls", flag::kLs}, {"hi", flag::kHi}, {"hs", flag::kHs}, {"equ", flag::kEqu}, {"neu", flag::kNeu}, {"ltu", flag::kLtu}, {"leu", flag::kLeu}, {"gtu", flag::kGtu}, {"geu", flag::kGeu}, {"num", flag::kNum}, {"nan", flag::kNan}});
  flags["BOOL_SHIFT"] = flag::kBoolShift;
  flags["BOOL"] = named({{"and", flag::kBoolAnd}, {"or", flag::kBoolOr}, {"xor", flag::kBoolXor}});
  flags["NEGATE_C"] = flag::kNegateC;
  flags["NEGATE_A"] = flag::kNegateA;
  flags["SET_FLOAT_RESULT"] = flag::kSetFloatResult;
  flags["SIGN_EXTEND"] = flag::kSignExtend;
  flags["ORDER_SHIFT"] = flag::kOrderShift;
  flags["ORDER"] = named({{"weak", flag::kWeak}, {"volatile", flag::kVolatile}, {"relaxed", flag::kRelaxed}, {"acquire", flag::kAcquire}, {"release", flag::kRelease}, {"acq_rel", flag::kAcqRel}, {"sc", flag::kSeqCst}, {"mmio", flag::kVolatile}});
  flags["SHIFT_AMOUNT"] = flag::kShiftAmount;
  flags["SHF_LEFT"] = flag::kShfLeft;
  flags["SHF_CLAMP"] = flag::kShfClamp;
  flags["PRMT_SHIFT"] = flag::kPrmtShift;
  flags["PRMT"] = named({{"f4e", flag::kPrmtF4e}, {"b4e", flag::kPrmtB4e}, {"rc8", flag::kPrmtRc8}, {"ecl", flag::kPrmtEcl}, {"ecr", flag::kPrmtEcr}, {"rc16", flag::kPrmtRc16}});
  flags["DST_TYPE_SHIFT"] = flag::kDstTypeShift;
  flags["SRC_TYPE_SHIFT"] = flag::kSrcTypeShift;
  flags["ATOM_SHIFT"] = flag::kAtomOpShift;
  flags["ATOM"] = named({{"add", flag::kAtomAdd}, {"min", flag::kAtomMin}, {"max", flag::kAtomMax}, {"inc", flag::kAtomInc}, {"dec", flag::kAtomDec}, {"and", flag::kAtomAnd}, {"or", flag::kAtomOr}, {"xor", flag::kAtomXor}, {"exch", flag::kAtomExch}, {"cas", flag::kAtomCas}});
  flags["SHFL_SHIFT"] = flag::kShflShift;
  flags["SHFL"] = named({{"up", flag::kShflUp}, {"down", flag::kShflDown}, {"bfly", flag::kShflBfly}, {"idx", flag::kShflIdx}});
  flags["VOTE_SHIFT"] = flag::kVoteShift;
  flags["VOTE"] = named({{"all", flag::kVoteAll}, {"any", flag::kVoteAny}, {"uni", flag::kVoteUni}, {"ballot", flag::kVoteBallot}});
  flags["MATCH_ALL"] = flag::kMatchAll;
  flags["DOT_SIGNED_A"] = flag::kDotSignedA;
  flags["DOT_SIGNED_B"] = flag::kDotSignedB;
  flags["DOT2_HIGH"] = flag::kDot2High;
  flags["REDUX_SHIFT"] = flag::kReduxShift;
  flags["REDUX"] = named({{"add", flag::kReduxAdd}, {"min", flag::kReduxMin}, {"max", flag::kReduxMax}, {"and", flag::kReduxAnd}, {"or", flag::kReduxOr}, {"xor", flag::kReduxXor}});
  flags["REDUX_SIGNED"] = flag::kReduxSigned;
  flags["BAR_SHIFT"] = flag::kBarShift;
  flags["BAR"] = named({{"sync", flag::kBarSync}, {"arrive", flag::kBarArrive}, {"popc", flag::kBarRedPopc}, {"and", flag::kBarRedAnd}, {"or", flag::kBarRedOr}});
  flags["CLUSTER_WAIT"] = flag::kClusterWait;
  flags["TEST_SHIFT"] = flag::kTestShift;
  flags["TEST"] = named({{"finite", flag::kTestFinite}, {"infinite", flag::kTestInfinite}, {"number", flag::kTestNumber}, {"notanumber", flag::kTestNotANumber}, {"normal", flag::kTestNormal}, {"subnormal", flag::kTestSubnormal}});
  flags["CLOCK_SHIFT"] = flag::kClockShift;
  flags["CLOCK"] = named({{"clock", flag::kClock32}, {"clock64", flag::kClock64}, {"globaltimer", flag::kGlobalTimer}});
  m.attr("FLAGS") = flags;
  m.attr("TYPE_CODES") = named({{"u8", kU8}, {"s8", kS8}, {"u16", kU16}, {"s16", kS16}, {"u32", kU32}, {"s32", kS32}, {"u64", kU64}, {"s64", kS64}, {"f16", kF16}, {"bf16", kBF16}, {"f32", kF32}, {"f64", kF64}});
  py::dict specials;
  const char* names[kSpecialCount] = {
      "%tid.x", "%tid.y", "%tid.z", "%ntid.x", "%ntid.y", "%ntid.z", "%ctaid.x", "%ctaid.y", "%ctaid.z",
      "%nctaid.x", "%nctaid.y", "%nctaid.z", "%laneid", "%warpid", "%nwarpid", "%smid", "%nsmid", "%gridid",
      "%lanemask_eq", "%lanemask_lt", "%lanemask_le", "%lanemask_gt", "%lanemask_ge",
      "%dynamic_smem_size", "%total_smem_size", "%aggr_smem_size",
      "%reserved_smem_offset_begin", "%reserved_smem_offset_end", "%reserved_smem_offset_cap",
      "%reserved_smem_offset_0", "%reserved_smem_offset_1",
      "%clusterid.x", "%clusterid.y", "%clusterid.z", "%nclusterid.x", "%nclusterid.y", "%nclusterid.z",
      "%cluster_ctaid.x", "%cluster_ctaid.y", "%cluster_ctaid.z",
      "%cluster_nctaid.x", "%cluster_nctaid.y", "%cluster_nctaid.z",
      "%cluster_ctarank", "%cluster_nctarank", "%is_explicit_cluster",
      "%envreg1", "%envreg2"};
  for (uint32_t i = 0; i < kSpecialCount; ++i) specials[names[i]] = i;
  auto mma = [](MmaType t) { return static_cast<uint32_t>(t); };
  m.attr("MMA_TYPES") = named({{"f16", mma(MmaType::kF16)}, {"bf16", mma(MmaType::kBF16)}, {"tf32", mma(MmaType::kTF32)},
                               {"f32", mma(MmaType::kF32)}, {"f64", mma(MmaType::kF64)}, {"s8", mma(MmaType::kS8)},
                               {"u8", mma(MmaType::kU8)}, {"s4", mma(MmaType::kS4)}, {"u4", mma(MmaType::kU4)},
                               {"e4m3", mma(MmaType::kE4M3)}, {"e5m2", mma(MmaType::kE5M2)}, {"s32", mma(MmaType::kS32)}});
  m.attr("SPECIALS") = specials;
  m.attr("BANK_SHIFT") = kBankShift;
  m.attr("BANK_FRAME") = static_cast<uint32_t>(kBankFrame);
  m.attr("BANK_WARP") = static_cast<uint32_t>(kBankWarp);
  m.attr("NO_SLOT") = kNoSlot;
  m.attr("MEMBER_MASK_OPERAND") = kMemberMaskOperand;
  m.attr("GLOBAL_BASE") = kGlobalBase;
  m.attr("SHARED_WINDOW") = kSharedWindow;
  m.attr("LOCAL_WINDOW") = kLocalWindow;
  m.attr("PARAM_WINDOW") = kParamWindow;
  m.attr("CODE_WINDOW") = kCodeWindow;
  m.attr("WARP_SIZE") = kWarpSize;
  m.attr("WINDOW_SIZE") = kWindowSize;
  m.attr("TENSOR_MAP_BYTES") = kTensorMapBytes;
  m.attr("TENSOR_MAP_MAX_RANK") = kTensorMapMaxRank;
  m.def(
      "tensor_map_field",
      [](const std::string& name, uint32_t ordinal) -> py::object {
        TensorMapField f = tensor_map_field(name, ordinal);
        if (f.size == 0) return py::none();
        return py::make_tuple(f.offset, f.size);
      },
      py::arg("name"), py::arg("ordinal") = 0,
      "(offset, size) of a field of the emulator's tensor map (tensor_map.h); None if it has none");
  m.attr("TEXTURE_BYTES") = kTextureBytes;
  m.attr("TEXTURE_MAGIC") = kTextureMagic;
  m.def(
      "texture_field",
      [](const std::string& name, uint32_t ordinal) -> py::object {
        TextureField f = texture_field(name, ordinal);
        if (f.size == 0) return py::none();
        return py::make_tuple(f.offset, f.size);
      },
      py::arg("name"), py::arg("ordinal") = 0,
      "(offset, size) of a field of the emulator's texture/surface descriptor (texture.h); None if it has none");
}

const ModuleRegistrar registrar("emulator", [](py::module_& parent) {
  py::module_ m = parent.def_submodule("emulator", "The PTX emulator's C++ interpreter (see tally/backends/emulator/).");
  memory_error_type = PyErr_NewException("tally._core.emulator.MemoryError", PyExc_RuntimeError, nullptr);
  m.attr("MemoryError") = py::handle(memory_error_type);
  py::register_local_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const MemoryError& e) {
      py::tuple args = py::make_tuple(e.code, std::string(e.what()));
      PyErr_SetObject(memory_error_type, args.ptr());
    }
  });
  bind_memory(m);
  bind_program(m);
  bind_heap(m);
  bind_launch(m);
  bind_constants(m);
});

}  // namespace
}  // namespace tally::emu
