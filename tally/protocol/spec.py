"""The wire protocol, once: every message kind and its fixed layout.

This module is pure data. `tools/gen_protocol.py` turns it into the C++ header
csrc/include/tally/protocol_generated.h (used by the server's C++ core and by the
client library) and into tally/protocol/messages_generated.py (one frozen
dataclass per message, which the server decodes requests into). A test fails
when either committed file differs from a fresh generation, so the sides cannot
drift.

Layout rules: little-endian, natural alignment, every struct a multiple of 8
bytes, padding written out as explicit `_pad*` fields so the C++ struct and the
Python format agree byte for byte. A message may end with a variable-length
`tail` of raw bytes (kernel parameters, names, small inline payloads).

Every record, on the rings and on the handshake socket, starts with a
RecordHeader {u32 kind, u32 size, u64 tag}: `size` counts the payload bytes after
the header, `tag` lets a reply name its request.
"""
from __future__ import annotations

from dataclasses import dataclass, field

PROTOCOL_VERSION = 2
# "TALY" in little-endian ASCII; first word of every shared segment header.
SEGMENT_MAGIC = 0x594C4154

# Slots in DeviceInfo.attributes (CU_DEVICE_ATTRIBUTE_MAX is 148 in CUDA 13.0).
ATTRIBUTE_SLOTS = 256

# Scalar types: name -> (C++ type, struct code, size)
SCALARS = {
    "u8": ("uint8_t", "B", 1),
    "u16": ("uint16_t", "H", 2),
    "u32": ("uint32_t", "I", 4),
    "u64": ("uint64_t", "Q", 8),
    "i32": ("int32_t", "i", 4),
    "i64": ("int64_t", "q", 8),
    "f64": ("double", "d", 8),
}


@dataclass(frozen=True)
class Field:
    name: str
    type: str          # a key of SCALARS
    count: int = 1     # > 1: fixed array (char/u8 arrays are bytes in Python)


@dataclass(frozen=True)
class Message:
    name: str          # CamelCase; the C++ struct is <name>Msg
    kind: int          # unique id on the wire
    doc: str
    fields: tuple[Field, ...] = ()
    tail: str | None = None  # description of trailing variable bytes, None if none


@dataclass(frozen=True)
class Enum:
    name: str
    doc: str
    values: tuple[tuple[str, int], ...] = field(default_factory=tuple)


def F(name: str, type_: str, count: int = 1) -> Field:
    return Field(name, type_, count)


# Where a copy's host bytes are (enums CopySource, CopyDest; see the driver messages).
SOURCE_INLINE, SOURCE_ARENA, SOURCE_PINNED = 0, 1, 2   # MemcpyHtoD.source (enum CopySource)
DEST_ARENA, DEST_PINNED = 0, 1                          # MemcpyDtoH.dest (enum CopyDest)

ENUMS = (
    Enum("Priority", "Scheduling class a client asks for at handshake.",
         (("HIGH", 0), ("BEST_EFFORT", 1))),
    Enum("HandshakeStatus", "Server's answer to Hello.",
         (("OK", 0), ("VERSION_MISMATCH", 1), ("QUOTA_UNAVAILABLE", 2), ("SERVER_ERROR", 3),
          ("BAD_REQUEST", 4))),
    Enum("CopySource", "Where MemcpyHtoD's bytes are.",
         (("INLINE", SOURCE_INLINE), ("ARENA", SOURCE_ARENA), ("PINNED", SOURCE_PINNED))),
    Enum("CopyDest", "Where MemcpyDtoH's bytes go.", (("ARENA", DEST_ARENA), ("PINNED", DEST_PINNED))),
    Enum("LaunchFlag", "Bits of LaunchKernel.flags.", (("COOPERATIVE", 1),)),
    Enum("GraphNodeType", "GraphNode.type: what a node of a GraphDefine does.",
         (("EMPTY", 0), ("KERNEL", 1), ("MEMSET", 2), ("MEMCPY", 3), ("HOST", 4), ("EVENT_RECORD", 5),
          ("EVENT_WAIT", 6))),
)

# One node of a GraphDefine/GraphNodeUpdate tail: this header (little-endian), then
# the kernel's parameter block (param_bytes, zero-padded to a multiple of 8):
# u32 type (GraphNodeType), u32 enabled (cuGraphNodeSetEnabled; 0 skips it),
# u64 function (a GetFunction id), u32 grid[3], u32 block[3], u32 shared_bytes,
# u32 param_bytes. A MEMSET node's "parameters" are GRAPH_MEMSET_FORMAT (a 1-D
# memset: u64 dst, u64 count of elements, u32 value, u32 element size 1, 2 or 4);
# its function, grid, block and shared_bytes are 0 or 1 and mean nothing; a MEMCPY
# node's are GRAPH_MEMCPY_FORMAT (a 1-D device-to-device copy: u64 dst, u64 src,
# u64 bytes), likewise; an EVENT_RECORD or EVENT_WAIT node's GRAPH_EVENT_FORMAT (u64:
# the job's event id); a HOST node has none (its function stays in the job: each
# GraphLaunch names a callback id per host node).
GRAPH_NODE_FORMAT = "<IIQ3I3III"
GRAPH_MEMSET_FORMAT = "<QQII"
GRAPH_MEMCPY_FORMAT = "<QQQ"
GRAPH_EVENT_FORMAT = "<Q"

# ---- the driver API on the rings (client_preload <-> tally/server/handlers) --------
# Handles: device pointers are the server's real addresses. Streams, events and
# host-function callbacks are named by ids the client picks (so creating them is
# fire-and-forget); modules and functions by ids the server returns.
# Stream ids: 0 is the legacy default stream; ids with bit 62 set are per-thread
# default streams (blocking, created on first use); others come from StreamCreate.
# Requests sent with tag 0 are asynchronous (their errors surface at the next
# synchronizing call); the same message with a tag is answered (Done, a reply
# message, or Error).
# Bulk bytes: a payload up to a few KiB rides in the record's tail; larger ones go
# through the upload arena (client -> server) or the download arena (server ->
# client, released by the client), or are read/written in place in a pinned host
# region (shared memory both sides map).
PER_THREAD_STREAM_BIT = 1 << 62
FUNC_ATTRIBUTE_SLOTS = 16    # CU_FUNC_ATTRIBUTE_MAX is 16 in CUDA 13.0

_ROWS = (F("width", "u64"), F("height", "u64"))  # bytes per row (elements for Memset), rows

DRIVER_MESSAGES = (
    Message("Done", 100, "server -> client: the request with this tag succeeded; nothing to return"),
    Message("MemAlloc", 101, "cuMemAlloc/cuMemAllocAsync: device memory, counted against the quota",
            (F("bytes", "u64"),)),
    Message("MemAllocReply", 102, "answer to MemAlloc", (F("dptr", "u64"),)),
    Message("MemFree", 103, "cuMemFree: waits for the client's work, frees dptr (must be an allocation start)",
            (F("dptr", "u64"),)),
    Message("MemFreeAsync", 104, "cuMemFreeAsync: freed once `stream` reaches this point",
            (F("dptr", "u64"), F("stream", "u64"))),
    Message("MemGetInfo", 105, "cuMemGetInfo: free and total bytes as this client sees them (quota applied)"),
    Message("MemInfoReply", 106, "answer to MemGetInfo", (F("free", "u64"), F("total", "u64"))),
    Message("Memset", 107, "cuMemsetD8/16/32[2D][Async]: `height` rows of `width` elements of "
            "`element_size` bytes, rows `pitch` bytes apart",
            (F("dst", "u64"), F("value", "u32"), F("element_size", "u32"), *_ROWS, F("pitch", "u64"),
             F("stream", "u64"))),
    Message("MemcpyHtoD", 108, "host -> device: `height` rows of `width` bytes, packed on the host side, "
            "rows `dst_pitch` bytes apart on the device; the bytes come from the tail, an upload-arena "
            "chunk (released by the server) or a pinned region",
            (F("dst", "u64"), *_ROWS, F("dst_pitch", "u64"), F("stream", "u64"),
             F("source", "u32"), F("_pad0", "u32"), F("arena_offset", "u64"), F("region", "u64"),
             F("region_offset", "u64")), tail="the bytes when source is SOURCE_INLINE"),
    Message("MemcpyDtoH", 109, "device -> host: `height` rows of `width` bytes, `src_pitch` apart on the "
            "device, packed on the host side; into a download-arena chunk named by the reply, or into a "
            "pinned region",
            (F("src", "u64"), *_ROWS, F("src_pitch", "u64"), F("stream", "u64"),
             F("dest", "u32"), F("_pad0", "u32"), F("region", "u64"), F("region_offset", "u64"))),
    Message("MemcpyDtoHReply", 110, "answer to MemcpyDtoH with DEST_ARENA: the bytes are in this "
            "download-arena chunk; the client releases it after copying them out",
            (F("arena_offset", "u64"), F("size", "u64"))),
    Message("MemcpyDtoD", 111, "device -> device, `height` rows of `width` bytes",
            (F("dst", "u64"), F("src", "u64"), *_ROWS, F("dst_pitch", "u64"), F("src_pitch", "u64"),
             F("stream", "u64"))),
    Message("StageBytes", 112, "async: append an upload-arena chunk to the session's staging buffer "
            "(module images too large for one record)",
            (F("arena_offset", "u64"), F("size", "u64"))),
    Message("ModuleLoad", 113, "cuModuleLoadData*/cuLibraryLoadData: an image (fatbin, cubin or PTX) "
            "from the tail, or the staging buffer when `staged`; `size` bytes of image, then "
            "`record_size` bytes of the cubin's JIT-capture record (tally/jit/records.py)",
            (F("size", "u64"), F("staged", "u32"), F("record_size", "u32")),
            tail="image bytes (and the record) unless staged"),
    Message("ModuleLoadReply", 114, "answer to ModuleLoad", (F("module", "u64"),)),
    Message("ModuleUnload", 115, "cuModuleUnload/cuLibraryUnload", (F("module", "u64"),)),
    Message("GetFunction", 116, "cuModuleGetFunction/cuLibraryGetKernel", (F("module", "u64"),),
            tail="kernel name (UTF-8, no NUL)"),
    Message("FunctionReply", 117, "answer to GetFunction: the handle, the parameter layout and the "
            "CU_FUNC_ATTRIBUTE_* values",
            (F("function", "u64"), F("param_count", "u32"), F("param_total", "u32"),
             F("attributes", "i32", FUNC_ATTRIBUTE_SLOTS)),
            tail="param_count x (u32 offset, u32 size)"),
    Message("GetGlobal", 118, "cuModuleGetGlobal/cuLibraryGetGlobal", (F("module", "u64"),),
            tail="variable name (UTF-8, no NUL)"),
    Message("GlobalReply", 119, "answer to GetGlobal", (F("dptr", "u64"), F("size", "u64"))),
    Message("LaunchKernel", 120, "cuLaunchKernel[Ex]: async; the tail is the parameter block laid out "
            "as FunctionReply said; flags: LaunchFlag bits (cooperative: all blocks co-resident, never "
            "sliced or preempted); `cluster`: cuLaunchKernelEx's CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION "
            "(0, 0, 0: none asked)",
            (F("function", "u64"), F("stream", "u64"), F("grid", "u32", 3), F("block", "u32", 3),
             F("shared_bytes", "u32"), F("flags", "u32"),
             F("cluster", "u32", 3), F("_pad1", "u32")), tail="parameter block"),
    Message("CtxSynchronize", 121, "cuCtxSynchronize: waits for all the client's streams"),
    Message("StreamCreate", 122, "async: a stream with the client-chosen id",
            (F("stream", "u64"), F("flags", "u32"), F("priority", "i32"))),
    Message("StreamDestroy", 123, "async: the stream's work completes, then it is released",
            (F("stream", "u64"),)),
    Message("StreamQuery", 124, "Done when idle, Error CUDA_ERROR_NOT_READY when busy", (F("stream", "u64"),)),
    Message("StreamSynchronize", 125, "waits for the stream", (F("stream", "u64"),)),
    Message("StreamWaitEvent", 126, "async: later work on `stream` waits for the event's last record",
            (F("stream", "u64"), F("event", "u64"))),
    Message("EventCreate", 127, "async: an event with the client-chosen id (flags: CU_EVENT_*)",
            (F("event", "u64"), F("flags", "u32"), F("_pad0", "u32"))),
    Message("EventRecord", 128, "async", (F("event", "u64"), F("stream", "u64"))),
    Message("EventQuery", 129, "Done when complete, Error CUDA_ERROR_NOT_READY otherwise", (F("event", "u64"),)),
    Message("EventSynchronize", 130, "waits for the event", (F("event", "u64"),)),
    Message("EventElapsedTime", 131, "milliseconds between two completed records",
            (F("start", "u64"), F("end", "u64"))),
    Message("ElapsedTimeReply", 132, "answer to EventElapsedTime", (F("ms", "f64"),)),
    Message("EventDestroy", 133, "async", (F("event", "u64"),)),
    Message("EventTimes", 157, "milliseconds from `reference` to each event the tail names, in one request "
            "(how tally's CUPTI reads the timing events it records around a job's work); `reference` must "
            "have completed", (F("reference", "u64"), F("count", "u32"), F("_pad0", "u32")),
            tail="count x u64 event id"),
    Message("EventTimesReply", 158, "answer to EventTimes",
            (F("count", "u32"), F("_pad0", "u32")),
            tail="count x f64 milliseconds: NaN while the event's work is not complete, +inf where the event "
                 "cannot be timed (unknown, without timing, never recorded, or its stream failed)"),
    Message("HostRegister", 134, "pinned host memory: the server maps the client's POSIX shared-memory "
            "object (mode 0600, named /tally-pin-<client pid>-...) to use it in place; `address` is where "
            "the client mapped it (kernels may use that address where the device can reach it)",
            (F("size", "u64"), F("address", "u64"), F("flags", "u32"), F("_pad0", "u32")),
            tail="shared-memory object name"),
    Message("HostRegisterReply", 135, "answer to HostRegister", (F("region", "u64"),)),
    Message("HostUnregister", 136, "the server unmaps the region", (F("region", "u64"),)),
    Message("LaunchHostFunc", 137, "async: when `stream` reaches this point the server posts "
            "HostFuncReady and holds the stream until HostFuncDone",
            (F("stream", "u64"), F("callback", "u64"))),
    Message("HostFuncReady", 138, "server -> client completion with tag 0: run this callback now",
            (F("callback", "u64"),)),
    Message("HostFuncDone", 139, "async: the callback returned; the stream goes on", (F("callback", "u64"),)),
    # Virtual memory management (cuMemAddressReserve, cuMemCreate, cuMemMap, ...): device address
    # ranges, physical memory (counted against the quota) and the mappings between them.
    Message("MemAddressReserve", 140, "reserve `bytes` of device address space, at `addr` if that is free "
            "(a hint, as CUDA's; 0: anywhere)", (F("bytes", "u64"), F("alignment", "u64"), F("addr", "u64"))),
    Message("MemAddressReply", 141, "answer to MemAddressReserve", (F("dptr", "u64"),)),
    Message("MemAddressFree", 142, "free a reservation (what is still mapped in it is unmapped)",
            (F("dptr", "u64"), F("bytes", "u64"))),
    Message("MemCreate", 143, "create `bytes` of physical device memory", (F("bytes", "u64"),)),
    Message("MemCreateReply", 144, "answer to MemCreate: the client's handle", (F("handle", "u64"),)),
    Message("MemRelease", 145, "release a physical handle (its memory lives while mapped)", (F("handle", "u64"),)),
    Message("MemMap", 146, "map `bytes` of a physical handle, from `offset`, at `dptr` in a reservation",
            (F("dptr", "u64"), F("bytes", "u64"), F("offset", "u64"), F("handle", "u64"))),
    Message("MemUnmap", 147, "waits for the client's work, then unmaps whole mappings",
            (F("dptr", "u64"), F("bytes", "u64"))),
    Message("MemSetAccess", 148, "enable (1) or disable (0) device access to whole mappings",
            (F("dptr", "u64"), F("bytes", "u64"), F("access", "u32"), F("_pad0", "u32"))),
    # Interprocess handles (cuIpcGet/Open/Close...): another job of the same server opens an
    # allocation or an interprocess event by the export id and secret the owner was given.
    Message("IpcGetMemHandle", 149, "export the allocation starting at dptr", (F("dptr", "u64"),)),
    Message("IpcHandleReply", 150, "answer to IpcGetMemHandle / IpcGetEventHandle",
            (F("export_id", "u64"), F("secret", "u64"))),
    Message("IpcOpenMemHandle", 151, "open another job's exported allocation",
            (F("export_id", "u64"), F("secret", "u64"))),
    Message("IpcOpenMemReply", 152, "answer to IpcOpenMemHandle", (F("dptr", "u64"), F("bytes", "u64"))),
    Message("IpcCloseMemHandle", 153, "close an opened allocation", (F("dptr", "u64"),)),
    Message("IpcGetEventHandle", 154, "export an interprocess event", (F("event", "u64"),)),
    Message("IpcOpenEventHandle", 155, "open another job's exported event as this client's `event` id",
            (F("event", "u64"), F("export_id", "u64"), F("secret", "u64"))),
    Message("MemAllocManaged", 156, "managed memory: the client's shared-memory object (named as for "
            "HostRegister), mapped at `dptr` in the client, becomes device memory at that address; "
            "Error CUDA_ERROR_ALREADY_MAPPED if the address is taken on the device",
            (F("dptr", "u64"), F("bytes", "u64"), F("flags", "u32"), F("_pad0", "u32")), tail="shared-memory object name"),
    # The JIT linker (cuLinkComplete; the load of an -rdc program's relocatable device code):
    # the server links the inputs' PTX into one module and sends the image back, which the
    # job then loads like any other (tally/server/client/linker.py says why it is done here).
    Message("LinkAdd", 160, "cuLinkAddData/cuLinkAddFile: one input of the client's link state `link` (an id "
            "the client picks; the first input creates it): its CUjitInputType, its name, then its bytes from "
            "the tail or the staging buffer when `staged` (`size` bytes: the input, then, when `record_size` is "
            "not 0, the JIT-capture record of a bare cubin input, that many bytes); read now, so Error "
            "CUDA_ERROR_INVALID_PTX (or INVALID_IMAGE, NO_BINARY_FOR_GPU, NOT_SUPPORTED) says why the input "
            "cannot be linked",
            (F("link", "u64"), F("size", "u64"), F("type", "u32"), F("name_size", "u32"), F("staged", "u32"),
             F("record_size", "u32")), tail="the name (name_size bytes), then the input bytes unless staged"),
    Message("LinkComplete", 161, "cuLinkComplete: link the inputs added to `link` into one PTX module; "
            "`verbose` is CU_JIT_LOG_VERBOSE, `max_registers` CU_JIT_MAX_REGISTERS (0: none; every kernel of "
            "the image gets .maxnreg at most that); answered by LinkReply",
            (F("link", "u64"), F("verbose", "u32"), F("max_registers", "u32"))),
    Message("LinkReply", 162, "answer to LinkComplete: `status` is CUDA_SUCCESS or why the link failed; the "
            "image (NUL-terminated PTX), the info log and the error log lie back to back in the download-arena "
            "chunk at `arena_offset` (`size` bytes; 0: no chunk), which the client releases",
            (F("status", "u32"), F("_pad0", "u32"), F("image_size", "u64"), F("info_log_size", "u64"),
             F("error_log_size", "u64"), F("arena_offset", "u64"), F("size", "u64"))),
    Message("LinkDestroy", 163, "async: cuLinkDestroy; the server forgets the link state's inputs",
            (F("link", "u64"),)),
    # Green contexts (cuDeviceGetDevResource, cuGreenCtxCreate, cuGreenCtxStreamCreate...): the
    # client splits and describes SM resources itself; the server says how many SMs the job may
    # use now (its SM share) and keeps a green context's streams to its SMs.
    Message("SmResourceQuery", 200, "cuDeviceGetDevResource/cuCtxGetDevResource for SMs: the SMs this job "
            "may use now and how they may be partitioned; answered by SmResourceReply"),
    Message("SmResourceReply", 201, "answer to SmResourceQuery: `sm_count` SMs (the job's share, else the "
            "device's), partitions of at least `min_partition` SMs in multiples of `alignment`",
            (F("sm_count", "u32"), F("min_partition", "u32"), F("alignment", "u32"), F("device_sm_count", "u32"))),
    Message("GreenStreamCreate", 202, "async: a stream of a green context, as StreamCreate, whose kernels run "
            "on at most `sm_count` SMs (and never more than the job's share)",
            (F("stream", "u64"), F("flags", "u32"), F("priority", "i32"), F("sm_count", "u32"), F("_pad0", "u32"))),
    # The limits of cuCtxSetLimit that the server keeps (the others live in the client).
    Message("CtxSetLimit", 230, "cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE): the size of the job's device heap "
            "(what kernels' malloc/free allocate from, counted against its quota); Done, or Error "
            "CUDA_ERROR_INVALID_VALUE once a kernel that calls malloc/free has run, CUDA_ERROR_OUT_OF_MEMORY "
            "when the job's limits or the device cannot hold it, CUDA_ERROR_UNSUPPORTED_LIMIT for another limit",
            (F("limit", "u32"), F("_pad0", "u32"), F("value", "u64"))),
    # Stream memory operations (cuStreamWaitValue32/64, cuStreamWriteValue32/64, each
    # operation of cuStreamBatchMemOp): asynchronous, in `stream` order.
    Message("StreamWaitValue", 240, "the stream waits until the `width`-byte value at `address` meets "
            "`condition` (CU_STREAM_WAIT_VALUE_GEQ/EQ/AND/NOR, flag bits included) against `value`",
            (F("stream", "u64"), F("address", "u64"), F("value", "u64"), F("width", "u32"),
             F("condition", "u32"))),
    # Shareable virtual-memory handles (cuMemExportToShareableHandle, cuMemImportFromShareableHandle,
    # cuMemRetainAllocationHandle, cuMemGetAccess): physical memory one job made, mapped by another
    # job of the same server; the owner's quota is charged.
    Message("MemExportHandle", 242, "export the physical handle `handle`; answered by IpcHandleReply",
            (F("handle", "u64"),)),
    Message("MemImportHandle", 243, "another job's exported physical memory becomes a handle of this "
            "client; answered by MemCreateReply", (F("export_id", "u64"), F("secret", "u64"))),
    Message("MemRetainHandle", 244, "one more reference to the physical handle mapped at `dptr`; "
            "answered by MemCreateReply", (F("dptr", "u64"),)),
    Message("MemGetAccess", 245, "whether the mapping at `dptr` is accessible; answered by MemAccessReply",
            (F("dptr", "u64"),)),
    Message("MemAccessReply", 246, "answer to MemGetAccess: 1 read-write, 0 none",
            (F("access", "u32"), F("_pad0", "u32"))),
    Message("ReleaseValueWaits", 247, "client -> server as the job's process exits (after main): its "
            "streams' waits on values end, so the work the C runtime's exit handlers wait for (module "
            "unloads) finishes; a process that ends leaves no stream waiting"),
    Message("StreamWriteValue", 241, "the stream writes the `width`-byte `value` at `address` "
            "(`flags`: CU_STREAM_WRITE_VALUE_*)",
            (F("stream", "u64"), F("address", "u64"), F("value", "u64"), F("width", "u32"),
             F("flags", "u32"))),
    # Stream attributes (cuStreamSetAttribute): the client keeps and answers them all; the
    # access-policy window also steers the device's L2 for the stream's later kernels.
    Message("StreamAccessPolicy", 260, "async: the stream's L2 access-policy window (CUaccessPolicyWindow) "
            "from its next operation on; num_bytes 0 clears it",
            (F("stream", "u64"), F("base", "u64"), F("num_bytes", "u64"), F("hit_ratio", "f64"),
             F("hit_prop", "u32"), F("miss_prop", "u32"))),
    # TMA tensor maps (cuTensorMapEncode*): encoded by the server's backend, so on a GPU
    # the 128 bytes are the driver's own (the job's device addresses are the server's).
    Message("TensorMapEncode", 261, "cuTensorMapEncodeTiled (`form` 0), Im2col (1) or Im2colWide (2); "
            "`global_strides` has rank - 1 entries, `lower_corner`/`upper_corner` rank - 2 (Im2colWide: "
            "one, the width's); answered by TensorMapReply",
            (F("form", "u32"), F("data_type", "u32"), F("rank", "u32"), F("interleave", "u32"),
             F("swizzle", "u32"), F("l2_promotion", "u32"), F("oob_fill", "u32"), F("wide_mode", "u32"),
             F("channels_per_pixel", "u32"), F("pixels_per_column", "u32"), F("global_address", "u64"),
             F("global_dim", "u64", 5), F("global_strides", "u64", 5), F("box_dim", "u32", 5),
             F("element_strides", "u32", 5), F("lower_corner", "i32", 5), F("upper_corner", "i32", 5))),
    Message("TensorMapReplaceAddress", 262, "cuTensorMapReplaceAddress: `map` with its global address "
            "replaced; answered by TensorMapReply",
            (F("map", "u8", 128), F("global_address", "u64"))),
    Message("TensorMapReply", 263, "an encoded tensor map (CUtensorMap's 128 opaque bytes)",
            (F("map", "u8", 128),)),
    # Texture and surface objects (cuTexObjectCreate, cuSurfObjectCreate): the client
    # resolves the resource (a CUDA array is linear memory it placed) and checks the
    # descriptors; the server's backend makes the object (tally/backends/texture_objects.py).
    Message("TextureCreate", 280, "a texture (`kind` 1) or surface (2) object over `address`: `resource` is the "
            "job's CUresourcetype (0 array, 2 linear, 3 pitch 2D), `shape` what the instructions see (texture.h's "
            "TextureShape), `pitch`/`slice_pitch` bytes between rows and slices or layers; the sampling fields are "
            "CUDA_TEXTURE_DESC's; answered by TextureReply",
            (F("address", "u64"), F("pitch", "u64"), F("slice_pitch", "u64"), F("kind", "u32"), F("resource", "u32"),
             F("shape", "u32"), F("format", "u32"), F("channels", "u32"), F("width", "u32"), F("height", "u32"),
             F("depth", "u32"), F("layers", "u32"), F("flags", "u32"), F("filter_mode", "u32"),
             F("address_mode", "u32", 3), F("border", "f64", 4))),
    Message("TextureDestroy", 281, "cuTexObjectDestroy / cuSurfObjectDestroy: the object goes once the job's "
            "queued work is done; answered Done or Error", (F("handle", "u64"),)),
    Message("TextureReply", 282, "the CUtexObject / CUsurfObject the job's kernels name", (F("handle", "u64"),)),
    # CUDA graphs known to the server (tally/server/client/graphs.py): an instantiated
    # graph arrives once, then each replay is one message.
    Message("GraphDefine", 270, "cuGraphInstantiate*: the instantiated graph `graph` (a client-chosen id; "
            "a second define of the same id replaces it); validated here, answered Done or Error",
            (F("graph", "u64"), F("node_count", "u32"), F("edge_count", "u32"), F("staged", "u32"),
             F("_pad0", "u32")),
            tail="node_count GraphNode records (48-byte header then the kernel's parameter block, padded "
                 "to 8 bytes), then edge_count (u32 from, u32 to) node-index pairs; in the staging buffer "
                 "instead when `staged` (a graph too big for one record)"),
    Message("GraphLaunch", 271, "cuGraphLaunch: async; one replay of `graph` on `stream`",
            (F("graph", "u64"), F("stream", "u64")),
            tail="u64 host-function callback ids, one per host node of the graph in node order (as "
                 "LaunchHostFunc's; none for a graph without host nodes)"),
    Message("GraphDestroy", 272, "cuGraphExecDestroy: async; the server forgets `graph` (queued replays "
            "still run)", (F("graph", "u64"),)),
    Message("GraphNodeUpdate", 273, "cuGraphExec*SetParams / cuGraphNodeSetEnabled: node `node` of `graph` "
            "replaced for later replays; answered Done or Error",
            (F("graph", "u64"), F("node", "u32"), F("_pad0", "u32")), tail="one GraphNode record"),
)


# Handshake and control messages travel on the unix socket; the rest on the rings.
MESSAGES = (
    Message("Hello", 1, "client -> server over the socket: first record of a connection",
            (F("protocol_version", "u32"), F("pid", "u32"), F("priority", "u32"), F("_pad0", "u32"),
             F("memory_quota", "u64"),  # bytes; 0 = no quota
             F("memory_quota_percent", "f64"),  # of device memory; 0 = unused
             F("sm_percent", "f64"),  # the job's SM share in (0, 100]; 0 = none asked
             F("program", "u8", 64))),  # argv[0] basename, NUL-padded, for status output
    Message("HelloReply", 2, "server -> client over the socket",
            (F("status", "u32"), F("protocol_version", "u32"), F("client_id", "u64"),
             F("segment_name", "u8", 64),  # NUL-padded POSIX shm name, e.g. /tally-123-1
             F("message", "u8", 192))),    # human-readable error when status != OK
    Message("DeviceInfo", 5, "server -> client over the socket, right after an OK HelloReply: "
            "the device snapshot the client answers attribute/name/UUID queries from",
            (F("driver_version", "i32"), F("cc_major", "i32"), F("cc_minor", "i32"), F("sm_count", "i32"),
             F("pci_domain", "i32"), F("pci_bus", "i32"), F("pci_device", "i32"), F("_pad0", "i32"),
             F("total_memory", "u64"),
             F("name", "u8", 256),        # NUL-padded
             F("uuid", "u8", 16),
             F("attributes", "i32", ATTRIBUTE_SLOTS))),  # indexed by CUdevice_attribute; 0 = unknown
    Message("StatusRequest", 3, "tool -> server over the socket: ask for a status report"),
    Message("StatusReply", 4, "server -> tool over the socket", tail="msgpack-encoded status dictionary"),
    # cuDriverGetVersion may come before cuInit (cudart asks first): the client asks the
    # server's driver version on a connection of its own, which registers no job.
    Message("DriverVersionQuery", 60, "client -> server over the socket: the driver version the server "
            "reports to its jobs (the same as DeviceInfo.driver_version); answered by DriverVersionReply"),
    Message("DriverVersionReply", 61, "server -> client over the socket: e.g. 13020 for CUDA 13.2",
            (F("driver_version", "i32"), F("_pad0", "i32"))),
    # Operator control of running jobs (tally-server set/pause/resume; tally/server/control.py):
    # one request per connection, answered by ControlReply.
    Message("ClientSet", 30, "tool -> server over the socket: change a running job's limits; a field of 0 "
            "leaves that limit as it is",
            (F("client_id", "u64"),
             F("memory_quota", "u64"),           # bytes
             F("memory_quota_percent", "f64"),   # of device memory
             F("sm_percent", "f64"))),
    Message("ClientPause", 31, "tool -> server over the socket: hold the job's work (nothing of it starts, "
            "nothing is lost); `force` = 1 allows pausing a high-priority job",
            (F("client_id", "u64"), F("force", "u32"), F("_pad0", "u32"))),
    Message("ClientResume", 32, "tool -> server over the socket: release a paused job's work",
            (F("client_id", "u64"),)),
    Message("ControlReply", 33, "server -> tool over the socket: `ok` = 1 when done (or nothing needed "
            "doing), 0 when refused", (F("ok", "u32"), F("_pad0", "u32")),
            tail="UTF-8 sentence: what changed, or why nothing did"),
    # Issue 15 (tally/server/eviction.py): the operator evicts a job, answered by ControlReply.
    Message("ClientEvict", 40, "tool -> server over the socket: evict a running job: its queued work is "
            "dropped, its memory freed and its later driver calls fail; it is told `reason` (the tail)",
            (F("client_id", "u32"), F("force", "u32")),   # force = 1 allows evicting a high-priority job
            tail="UTF-8 reason the job is told"),
    # Suspending a job (tally-server suspend; tally/server/suspend.py): `tally-server resume`
    # (ClientResume) brings a suspended job back. One request per connection, answered by ControlReply.
    Message("ClientSuspend", 50, "tool -> server over the socket: hold the job's work, save its device memory "
            "to host memory and free it; `force` = 1 allows suspending a high-priority job",
            (F("client_id", "u64"), F("force", "u32"), F("_pad0", "u32"))),
    # Migrating a job to another tally-server on this node (tally-server migrate;
    # tally/server/migration.py on the source, migration_import.py on the target).
    Message("ClientMigrate", 51, "tool -> source server over its socket: move the job to the server whose "
            "socket path is the tail; answered by ControlReply", (F("client_id", "u64"),),
            tail="UTF-8 path of the target server's socket"),
    Message("MigrateOffer", 52, "source -> target server over the target's socket, the connection's first "
            "record: a job would move here; answered by ControlReply (refused: why)",
            tail="msgpack: the job's description (program, priority, quota, footprint, device)"),
    Message("MigrateState", 53, "source -> target, after an accepted offer: one piece of the job's state "
            "(an allocation, a chunk of its bytes, a module, its streams, events, session); not answered",
            tail="msgpack: the piece"),
    Message("MigrateCommit", 54, "source -> target after the last piece, right after the job's handshake "
            "socket went over as SCM_RIGHTS: take the job over (its segment and the requests not handled "
            "yet); answered by ControlReply", tail="msgpack: segment name and pending requests"),
    Message("Ping", 16, "client -> server on the request ring: sync no-op, answered by Pong",
            (F("value", "u64"),)),
    Message("Pong", 17, "server -> client on the completion ring", (F("value", "u64"),)),
    Message("Notify", 18, "client -> server on the request ring: async no-op (benchmarks)",
            (F("value", "u64"),)),
    Message("Goodbye", 19, "client -> server: orderly disconnect; server frees everything"),
    Message("Error", 20, "server -> client on the completion ring: the request with this tag failed",
            (F("status", "u32"), F("_pad0", "u32")), tail="UTF-8 explanation"),
    Message("KernelOutput", 21, "server -> client on the completion ring (tag 0), before the reply to a "
            "synchronizing call: what the client's kernels printed (device printf) on the streams it "
            "waited for; the client writes it to its own stdout", tail="UTF-8 text"),
    Message("Evicted", 210, "server -> client on the completion ring (tag 0): the server evicted this job "
            "(an operator, SysProbe, or the server shutting down); its memory is freed and every later driver "
            "call fails with `status`; `work_dropped` is 1 when the eviction dropped work the job had asked for "
            "(queued, running or not yet handled), 0 when the job had none (its work was done)",
            (F("status", "u32"), F("work_dropped", "u32")), tail="UTF-8 reason"),
    Message("KernelStderr", 190, "server -> client on the completion ring (tag 0), right before the Error "
            "record it belongs to: what the device wrote for the job's stderr (a failed device assert's "
            "message, in CUDA's format); the client writes it to its own stderr", tail="UTF-8 text"),
) + DRIVER_MESSAGES
