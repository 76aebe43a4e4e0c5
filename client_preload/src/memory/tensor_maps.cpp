// TMA tensor maps (cuTensorMapEncodeTiled, Im2col, Im2colWide, ReplaceAddress):
// the server's backend encodes them (tally/server/handlers/tensor_maps.py), so on
// a GPU the 128 bytes are the driver's own for the job's device addresses, and on
// the emulator they are the layout its TMA copies read. What the client checks
// itself is what it must read: the pointers and the rank that sizes the arrays.
#include <cstdint>
#include <cstring>

#include "connection/connection.h"
#include "entry_points/entry_point.h"

namespace tally::client {
namespace {

constexpr uint32_t kMaxRank = 5;
enum Form : uint32_t { kTiled = 0, kIm2col = 1, kIm2colWide = 2 };

struct Common {
  CUtensorMap* map;
  CUtensorMapDataType type;
  cuuint32_t rank;
  void* address;
  const cuuint64_t* dims;
  const cuuint64_t* strides;
  const cuuint32_t* element_strides;
  CUtensorMapInterleave interleave;
  CUtensorMapSwizzle swizzle;
  CUtensorMapL2promotion l2;
  CUtensorMapFloatOOBfill fill;
};

// Fills the message's common fields; CUDA_ERROR_INVALID_VALUE for what cannot be read.
CUresult fill(const Common& c, Form form, protocol::TensorMapEncodeMsg* msg) {
  if (c.map == nullptr || c.dims == nullptr || c.element_strides == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (reinterpret_cast<uintptr_t>(c.map) % 64 != 0) return CUDA_ERROR_INVALID_VALUE;   // as the driver asks
  if (c.rank == 0 || c.rank > kMaxRank) return CUDA_ERROR_INVALID_VALUE;
  if (c.rank > 1 && c.strides == nullptr) return CUDA_ERROR_INVALID_VALUE;
  msg->form = form;
  msg->data_type = c.type;
  msg->rank = c.rank;
  msg->interleave = c.interleave;
  msg->swizzle = c.swizzle;
  msg->l2_promotion = c.l2;
  msg->oob_fill = c.fill;
  msg->global_address = reinterpret_cast<uint64_t>(c.address);
  for (cuuint32_t i = 0; i < c.rank; ++i) {
    msg->global_dim[i] = c.dims[i];
    msg->element_strides[i] = c.element_strides[i];
    if (i + 1 < c.rank) msg->global_strides[i] = c.strides[i];
  }
  return CUDA_SUCCESS;
}

CUresult encode(const protocol::TensorMapEncodeMsg& msg, CUtensorMap* map) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  protocol::TensorMapReplyMsg out{};
  if (CUresult rc = request_reply(msg, protocol::MessageKind::TensorMapReply, &out); rc != CUDA_SUCCESS) return rc;
  static_assert(sizeof(out.map) == sizeof(CUtensorMap), "a tensor map is 128 bytes");
  std::memcpy(map, out.map, sizeof out.map);
  return CUDA_SUCCESS;
}

}  // namespace
}  // namespace tally::client

using namespace tally::client;
namespace protocol = tally::protocol;

TALLY_ENTRY(cuTensorMapEncodeTiled_v12000)(CUtensorMap* tensorMap, CUtensorMapDataType tensorDataType,
                                           cuuint32_t tensorRank, void* globalAddress, const cuuint64_t* globalDim,
                                           const cuuint64_t* globalStrides, const cuuint32_t* boxDim,
                                           const cuuint32_t* elementStrides, CUtensorMapInterleave interleave,
                                           CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2Promotion,
                                           CUtensorMapFloatOOBfill oobFill) {
  protocol::TensorMapEncodeMsg msg{};
  Common c{tensorMap, tensorDataType, tensorRank, globalAddress, globalDim, globalStrides, elementStrides,
           interleave, swizzle, l2Promotion, oobFill};
  if (CUresult rc = fill(c, kTiled, &msg); rc != CUDA_SUCCESS) return rc;
  if (boxDim == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (cuuint32_t i = 0; i < tensorRank; ++i) msg.box_dim[i] = boxDim[i];
  return encode(msg, tensorMap);
}

TALLY_ENTRY(cuTensorMapEncodeIm2col_v12000)(CUtensorMap* tensorMap, CUtensorMapDataType tensorDataType,
                                            cuuint32_t tensorRank, void* globalAddress, const cuuint64_t* globalDim,
                                            const cuuint64_t* globalStrides, const int* pixelBoxLowerCorner,
                                            const int* pixelBoxUpperCorner, cuuint32_t channelsPerPixel,
                                            cuuint32_t pixelsPerColumn, const cuuint32_t* elementStrides,
                                            CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
                                            CUtensorMapL2promotion l2Promotion, CUtensorMapFloatOOBfill oobFill) {
  protocol::TensorMapEncodeMsg msg{};
  Common c{tensorMap, tensorDataType, tensorRank, globalAddress, globalDim, globalStrides, elementStrides,
           interleave, swizzle, l2Promotion, oobFill};
  if (CUresult rc = fill(c, kIm2col, &msg); rc != CUDA_SUCCESS) return rc;
  if (tensorRank < 3 || pixelBoxLowerCorner == nullptr || pixelBoxUpperCorner == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (cuuint32_t i = 0; i + 2 < tensorRank; ++i) {
    msg.lower_corner[i] = pixelBoxLowerCorner[i];
    msg.upper_corner[i] = pixelBoxUpperCorner[i];
  }
  msg.channels_per_pixel = channelsPerPixel;
  msg.pixels_per_column = pixelsPerColumn;
  return encode(msg, tensorMap);
}

TALLY_ENTRY(cuTensorMapEncodeIm2colWide_v12080)(CUtensorMap* tensorMap, CUtensorMapDataType tensorDataType,
                                                cuuint32_t tensorRank, void* globalAddress,
                                                const cuuint64_t* globalDim, const cuuint64_t* globalStrides,
                                                int pixelBoxLowerCornerWidth, int pixelBoxUpperCornerWidth,
                                                cuuint32_t channelsPerPixel, cuuint32_t pixelsPerColumn,
                                                const cuuint32_t* elementStrides, CUtensorMapInterleave interleave,
                                                CUtensorMapIm2ColWideMode mode, CUtensorMapSwizzle swizzle,
                                                CUtensorMapL2promotion l2Promotion, CUtensorMapFloatOOBfill oobFill) {
  protocol::TensorMapEncodeMsg msg{};
  Common c{tensorMap, tensorDataType, tensorRank, globalAddress, globalDim, globalStrides, elementStrides,
           interleave, swizzle, l2Promotion, oobFill};
  if (CUresult rc = fill(c, kIm2colWide, &msg); rc != CUDA_SUCCESS) return rc;
  msg.lower_corner[0] = pixelBoxLowerCornerWidth;
  msg.upper_corner[0] = pixelBoxUpperCornerWidth;
  msg.channels_per_pixel = channelsPerPixel;
  msg.pixels_per_column = pixelsPerColumn;
  msg.wide_mode = mode;
  return encode(msg, tensorMap);
}

TALLY_ENTRY(cuTensorMapReplaceAddress_v12000)(CUtensorMap* tensorMap, void* globalAddress) {
  if (tensorMap == nullptr || reinterpret_cast<uintptr_t>(tensorMap) % 64 != 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  protocol::TensorMapReplaceAddressMsg msg{};
  std::memcpy(msg.map, tensorMap, sizeof msg.map);
  msg.global_address = reinterpret_cast<uint64_t>(globalAddress);
  protocol::TensorMapReplyMsg out{};
  if (CUresult rc = request_reply(msg, protocol::MessageKind::TensorMapReply, &out); rc != CUDA_SUCCESS) return rc;
  std::memcpy(tensorMap, out.map, sizeof out.map);
  return CUDA_SUCCESS;
}
