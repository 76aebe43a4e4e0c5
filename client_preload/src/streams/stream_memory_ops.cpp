// Stream memory operations: cuStreamWaitValue32/64, cuStreamWriteValue32/64 (the
// v1 and v2 ABI forms, and per-thread ones) and cuStreamBatchMemOp, which sends
// one request per operation, in order, on its stream. Each is asynchronous with
// respect to the device but answered once the server has checked the address
// (memory the job owns, or pinned host memory the device reaches) and queued the
// operation (tally/server/handlers/stream_memory_ops.py), so a bad address fails
// at the call with CUDA_ERROR_INVALID_VALUE and the reason, as the driver's
// check does. On a capturing stream each becomes a batch-mem-op node.
#include "connection/connection.h"
#include "entry_points/entry_point.h"
#include "graphs/capture.h"
#include "graphs/graph_objects.h"
#include "logging/log.h"
#include "streams/stream_ids.h"

namespace tally::client {
namespace {

constexpr unsigned kWaitConditionMask = 0x3;          // GEQ, EQ, AND, NOR
constexpr unsigned kWaitFlush = 1u << 30;              // CU_STREAM_WAIT_VALUE_FLUSH
constexpr unsigned kWriteNoMemoryBarrier = 0x1;        // CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER

// A captured operation is a batch-mem-op node holding it (graphs/batch_mem_op_nodes.cpp).
CUstreamBatchMemOpParams as_mem_op(bool wait, CUdeviceptr address, uint64_t value, unsigned width, unsigned flags) {
  CUstreamBatchMemOpParams op{};
  if (wait) {
    op.waitValue.operation = width == 4 ? CU_STREAM_MEM_OP_WAIT_VALUE_32 : CU_STREAM_MEM_OP_WAIT_VALUE_64;
    op.waitValue.address = address;
    op.waitValue.value64 = value;   // the union's 32-bit value is its low half
    op.waitValue.flags = flags;
  } else {
    op.writeValue.operation = width == 4 ? CU_STREAM_MEM_OP_WRITE_VALUE_32 : CU_STREAM_MEM_OP_WRITE_VALUE_64;
    op.writeValue.address = address;
    op.writeValue.value64 = value;
    op.writeValue.flags = flags;
  }
  return op;
}

CUresult send_wait(uint64_t stream, CUdeviceptr address, uint64_t value, unsigned width, unsigned flags) {
  if (CUresult rc; captured(stream, true, &rc, [=](GraphNode& node) {
        node.type = CU_GRAPH_NODE_TYPE_BATCH_MEM_OP;
        node.mem_ops.push_back(as_mem_op(true, address, value, width, flags));
        node.ops.push_back([=](uint64_t s) { return send_wait(s, address, value, width, flags); });
      }))
    return rc;
  Connection::instance().note_value_waits();
  protocol::StreamWaitValueMsg m{};
  m.stream = stream, m.address = address, m.value = value, m.width = width, m.condition = flags;
  return Connection::instance().request_done(m);
}

CUresult send_write(uint64_t stream, CUdeviceptr address, uint64_t value, unsigned width, unsigned flags) {
  if (CUresult rc; captured(stream, true, &rc, [=](GraphNode& node) {
        node.type = CU_GRAPH_NODE_TYPE_BATCH_MEM_OP;
        node.mem_ops.push_back(as_mem_op(false, address, value, width, flags));
        node.ops.push_back([=](uint64_t s) { return send_write(s, address, value, width, flags); });
      }))
    return rc;
  protocol::StreamWriteValueMsg m{};
  m.stream = stream, m.address = address, m.value = value, m.width = width, m.flags = flags;
  return Connection::instance().request_done(m);
}

// What the client can refuse itself, with the reason on stderr and in the driver's
// error log, as the server's refusals are reported.
CUresult check(const char* call, CUdeviceptr address, unsigned width, unsigned flags, bool wait) {
  if (address % width != 0) {
    log_error("%s: address 0x%llx is not aligned to %u bytes (CUDA_ERROR_INVALID_VALUE)", call,
              static_cast<unsigned long long>(address), width);
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (wait && (flags & kWaitFlush)) {
    log_error("%s: CU_STREAM_WAIT_VALUE_FLUSH needs remote-write flushing, which this device does not report "
              "(CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES is 0) (CUDA_ERROR_NOT_SUPPORTED)", call);
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  if ((wait && (flags & ~(kWaitConditionMask | kWaitFlush))) || (!wait && (flags & ~kWriteNoMemoryBarrier))) {
    log_error("%s: unknown flags 0x%x (CUDA_ERROR_INVALID_VALUE)", call, flags);
    return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult wait_value(const char* call, CUstream stream, bool per_thread, CUdeviceptr address, uint64_t value,
                    unsigned width, unsigned flags) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  uint64_t id = 0;
  if (CUresult rc = stream_id(stream, per_thread, &id); rc != CUDA_SUCCESS) return rc;
  if (CUresult rc = check(call, address, width, flags, true); rc != CUDA_SUCCESS) return rc;
  return send_wait(id, address, value, width, flags);
}

CUresult write_value(const char* call, CUstream stream, bool per_thread, CUdeviceptr address, uint64_t value,
                     unsigned width, unsigned flags) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  uint64_t id = 0;
  if (CUresult rc = stream_id(stream, per_thread, &id); rc != CUDA_SUCCESS) return rc;
  if (CUresult rc = check(call, address, width, flags, false); rc != CUDA_SUCCESS) return rc;
  return send_write(id, address, value, width, flags);
}

CUresult batch(CUstream stream, bool per_thread, unsigned count, const CUstreamBatchMemOpParams* ops,
               unsigned flags) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  if (flags != 0 || (count > 0 && ops == nullptr)) {
    log_error("cuStreamBatchMemOp: %s (CUDA_ERROR_INVALID_VALUE)",
              flags != 0 ? "flags must be 0" : "no operations given for a nonzero count");
    return CUDA_ERROR_INVALID_VALUE;
  }
  uint64_t id = 0;
  if (CUresult rc = stream_id(stream, per_thread, &id); rc != CUDA_SUCCESS) return rc;
  // Everything is checked before anything is sent: a refused batch queues nothing.
  for (unsigned i = 0; i < count; ++i) {
    const CUstreamBatchMemOpParams& op = ops[i];
    switch (op.operation) {
      case CU_STREAM_MEM_OP_WAIT_VALUE_32:
      case CU_STREAM_MEM_OP_WAIT_VALUE_64: {
        unsigned width = op.operation == CU_STREAM_MEM_OP_WAIT_VALUE_32 ? 4 : 8;
        if (CUresult rc = check("cuStreamBatchMemOp", op.waitValue.address, width, op.waitValue.flags, true);
            rc != CUDA_SUCCESS)
          return rc;
        break;
      }
      case CU_STREAM_MEM_OP_WRITE_VALUE_32:
      case CU_STREAM_MEM_OP_WRITE_VALUE_64: {
        unsigned width = op.operation == CU_STREAM_MEM_OP_WRITE_VALUE_32 ? 4 : 8;
        if (CUresult rc = check("cuStreamBatchMemOp", op.writeValue.address, width, op.writeValue.flags, false);
            rc != CUDA_SUCCESS)
          return rc;
        break;
      }
      case CU_STREAM_MEM_OP_BARRIER:
        break;   // every operation of a stream already runs after the previous one's writes
      case CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES:
        log_error("cuStreamBatchMemOp: operation %u flushes remote writes, which this device does not report "
                  "(CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES is 0) (CUDA_ERROR_NOT_SUPPORTED)", i);
        return CUDA_ERROR_NOT_SUPPORTED;
      default:
        log_error("cuStreamBatchMemOp: operation %u has unknown type %d (CUDA_ERROR_INVALID_VALUE)", i,
                  static_cast<int>(op.operation));
        return CUDA_ERROR_INVALID_VALUE;
    }
  }
  for (unsigned i = 0; i < count; ++i) {
    const CUstreamBatchMemOpParams& op = ops[i];
    CUresult rc = CUDA_SUCCESS;
    switch (op.operation) {
      case CU_STREAM_MEM_OP_WAIT_VALUE_32:
        rc = send_wait(id, op.waitValue.address, op.waitValue.value, 4, op.waitValue.flags);
        break;
      case CU_STREAM_MEM_OP_WAIT_VALUE_64:
        rc = send_wait(id, op.waitValue.address, op.waitValue.value64, 8, op.waitValue.flags);
        break;
      case CU_STREAM_MEM_OP_WRITE_VALUE_32:
        rc = send_write(id, op.writeValue.address, op.writeValue.value, 4, op.writeValue.flags);
        break;
      case CU_STREAM_MEM_OP_WRITE_VALUE_64:
        rc = send_write(id, op.writeValue.address, op.writeValue.value64, 8, op.writeValue.flags);
        break;
      default:
        break;
    }
    if (rc != CUDA_SUCCESS) return rc;
  }
  return CUDA_SUCCESS;
}

}  // namespace
}  // namespace tally::client

using namespace tally::client;

TALLY_ENTRY(cuStreamWaitValue32_v8000)(CUstream s, CUdeviceptr_v2 a, cuuint32_t v, unsigned int f) {
  return wait_value("cuStreamWaitValue32", s, false, a, v, 4, f);
}
TALLY_ENTRY(cuStreamWriteValue32_v8000)(CUstream s, CUdeviceptr_v2 a, cuuint32_t v, unsigned int f) {
  return write_value("cuStreamWriteValue32", s, false, a, v, 4, f);
}

TALLY_ENTRY(cuStreamWaitValue32_v8000_ptsz)(CUstream s, CUdeviceptr_v2 a, cuuint32_t v, unsigned int f) {
  return wait_value("cuStreamWaitValue32", s, true, a, v, 4, f);
}
TALLY_ENTRY(cuStreamWriteValue32_v8000_ptsz)(CUstream s, CUdeviceptr_v2 a, cuuint32_t v, unsigned int f) {
  return write_value("cuStreamWriteValue32", s, true, a, v, 4, f);
}

TALLY_ENTRY(cuStreamWaitValue32_v11070)(CUstream s, CUdeviceptr_v2 a, cuuint32_t v, unsigned int f) {
  return wait_value("cuStreamWaitValue32", s, false, a, v, 4, f);
}
TALLY_ENTRY(cuStreamWriteValue32_v11070)(CUstream s, CUdeviceptr_v2 a, cuuint32_t v, unsigned int f) {
  return write_value("cuStreamWriteValue32", s, false, a, v, 4, f);
}

TALLY_ENTRY(cuStreamWaitValue32_v11070_ptsz)(CUstream s, CUdeviceptr_v2 a, cuuint32_t v, unsigned int f) {
  return wait_value("cuStreamWaitValue32", s, true, a, v, 4, f);
}
TALLY_ENTRY(cuStreamWriteValue32_v11070_ptsz)(CUstream s, CUdeviceptr_v2 a, cuuint32_t v, unsigned int f) {
  return write_value("cuStreamWriteValue32", s, true, a, v, 4, f);
}

TALLY_ENTRY(cuStreamWaitValue64_v9000)(CUstream s, CUdeviceptr_v2 a, cuuint64_t v, unsigned int f) {
  return wait_value("cuStreamWaitValue64", s, false, a, v, 8, f);
}
TALLY_ENTRY(cuStreamWriteValue64_v9000)(CUstream s, CUdeviceptr_v2 a, cuuint64_t v, unsigned int f) {
  return write_value("cuStreamWriteValue64", s, false, a, v, 8, f);
}

TALLY_ENTRY(cuStreamWaitValue64_v9000_ptsz)(CUstream s, CUdeviceptr_v2 a, cuuint64_t v, unsigned int f) {
  return wait_value("cuStreamWaitValue64", s, true, a, v, 8, f);
}
TALLY_ENTRY(cuStreamWriteValue64_v9000_ptsz)(CUstream s, CUdeviceptr_v2 a, cuuint64_t v, unsigned int f) {
  return write_value("cuStreamWriteValue64", s, true, a, v, 8, f);
}

TALLY_ENTRY(cuStreamWaitValue64_v11070)(CUstream s, CUdeviceptr_v2 a, cuuint64_t v, unsigned int f) {
  return wait_value("cuStreamWaitValue64", s, false, a, v, 8, f);
}
TALLY_ENTRY(cuStreamWriteValue64_v11070)(CUstream s, CUdeviceptr_v2 a, cuuint64_t v, unsigned int f) {
  return write_value("cuStreamWriteValue64", s, false, a, v, 8, f);
}

TALLY_ENTRY(cuStreamWaitValue64_v11070_ptsz)(CUstream s, CUdeviceptr_v2 a, cuuint64_t v, unsigned int f) {
  return wait_value("cuStreamWaitValue64", s, true, a, v, 8, f);
}
TALLY_ENTRY(cuStreamWriteValue64_v11070_ptsz)(CUstream s, CUdeviceptr_v2 a, cuuint64_t v, unsigned int f) {
  return write_value("cuStreamWriteValue64", s, true, a, v, 8, f);
}

// The v1 (v8000) and v2 (v11070) parameter unions have one layout in CUDA 12+ headers.
TALLY_ENTRY(cuStreamBatchMemOp_v8000)(CUstream s, unsigned int count, CUstreamBatchMemOpParams* ops, unsigned int f) {
  return batch(s, false, count, ops, f);
}
TALLY_ENTRY(cuStreamBatchMemOp_v8000_ptsz)(CUstream s, unsigned int count, CUstreamBatchMemOpParams_v1* ops,
                                           unsigned int f) {
  return batch(s, true, count, ops, f);
}
TALLY_ENTRY(cuStreamBatchMemOp_v11070)(CUstream s, unsigned int count, CUstreamBatchMemOpParams* ops, unsigned int f) {
  return batch(s, false, count, ops, f);
}
TALLY_ENTRY(cuStreamBatchMemOp_v11070_ptsz)(CUstream s, unsigned int count, CUstreamBatchMemOpParams* ops,
                                            unsigned int f) {
  return batch(s, true, count, ops, f);
}
