// Texture and surface objects (cuTexObjectCreate, cuSurfObjectCreate and their
// destroy and descriptor calls). The client resolves the resource to device memory
// (a CUDA array is linear memory it placed: cuda_arrays.h), checks the descriptors as
// the driver documents, and asks the server for the object: on a GPU the driver's,
// on the emulator the address of tally's descriptor (csrc/src/emulator/texture.h).
// It keeps each object's descriptors to answer the Get*Desc calls.
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "arrays/cuda_arrays.h"
#include "connection/connection.h"
#include "entry_points/entry_point.h"
#include "logging/log.h"

namespace tally::client {
namespace {

namespace protocol = tally::protocol;

constexpr uint32_t kTexture = 1, kSurface = 2;
// texture.h's TextureShape
enum Shape : uint32_t { kLinear = 0, k1d, k2d, k3d, kLayered1d, kLayered2d, kCube, kLayeredCube };
constexpr unsigned kKnownTextureFlags = CU_TRSF_READ_AS_INTEGER | CU_TRSF_NORMALIZED_COORDINATES | CU_TRSF_SRGB |
                                        CU_TRSF_DISABLE_TRILINEAR_OPTIMIZATION | CU_TRSF_SEAMLESS_CUBEMAP;

struct TextureObject {
  uint32_t kind;
  CUDA_RESOURCE_DESC resource;
  CUDA_TEXTURE_DESC texture;
};

std::mutex g_mutex;
std::unordered_map<uint64_t, TextureObject> g_objects;

Shape array_shape(const CUDA_ARRAY3D_DESCRIPTOR& d) {
  if (d.Flags & CUDA_ARRAY3D_CUBEMAP) return (d.Flags & CUDA_ARRAY3D_LAYERED) ? kLayeredCube : kCube;
  if (d.Flags & CUDA_ARRAY3D_LAYERED) return d.Height == 0 ? kLayered1d : kLayered2d;
  if (d.Depth != 0) return k3d;
  return d.Height != 0 ? k2d : k1d;
}

// The message's resource fields from `res`; CUDA_ERROR_INVALID_VALUE (or _HANDLE for an
// unknown array) where the driver refuses it.
CUresult describe_resource(const CUDA_RESOURCE_DESC& res, uint32_t kind, protocol::TextureCreateMsg* msg) {
  if (res.flags != 0) return CUDA_ERROR_INVALID_VALUE;
  msg->kind = kind;
  msg->resource = res.resType;
  msg->depth = msg->layers = 1;
  switch (res.resType) {
    case CU_RESOURCE_TYPE_ARRAY: {
      ArrayLayout a{};
      if (CUresult rc = array_layout(res.res.array.hArray, &a); rc != CUDA_SUCCESS) return rc;
      const CUDA_ARRAY3D_DESCRIPTOR& d = a.desc;
      if (kind == kSurface && !(d.Flags & CUDA_ARRAY3D_SURFACE_LDST)) {
        log_error("cuSurfObjectCreate: the CUDA array was not created with CUDA_ARRAY3D_SURFACE_LDST "
                  "(CUDA_ERROR_INVALID_VALUE)");
        return CUDA_ERROR_INVALID_VALUE;
      }
      const Shape shape = array_shape(d);
      msg->shape = shape;
      msg->format = d.Format;
      msg->channels = d.NumChannels;
      msg->address = a.address;
      msg->width = static_cast<uint32_t>(d.Width);
      msg->height = static_cast<uint32_t>(a.rows);
      msg->pitch = a.row_bytes;
      msg->slice_pitch = a.row_bytes * a.rows;
      const uint32_t slices = d.Depth == 0 ? 1 : static_cast<uint32_t>(d.Depth);
      if (shape == k3d) {
        msg->depth = slices;
      } else {
        msg->layers = slices;   // layers, cube faces (6 per layer), or 1
      }
      return CUDA_SUCCESS;
    }
    case CU_RESOURCE_TYPE_LINEAR: {
      const auto& l = res.res.linear;
      const size_t texel = texel_bytes(l.format, l.numChannels);
      if (kind == kSurface || l.devPtr == 0 || texel == 0 || l.sizeInBytes < texel) return CUDA_ERROR_INVALID_VALUE;
      msg->shape = kLinear;
      msg->format = l.format;
      msg->channels = l.numChannels;
      msg->address = l.devPtr;
      msg->width = static_cast<uint32_t>(l.sizeInBytes / texel);
      msg->height = 1;
      msg->pitch = msg->slice_pitch = l.sizeInBytes;
      return l.sizeInBytes / texel > UINT32_MAX ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
    }
    case CU_RESOURCE_TYPE_PITCH2D: {
      const auto& p = res.res.pitch2D;
      const size_t texel = texel_bytes(p.format, p.numChannels);
      if (kind == kSurface || p.devPtr == 0 || texel == 0 || p.width == 0 || p.height == 0 ||
          p.pitchInBytes < p.width * texel || p.width > UINT32_MAX || p.height > UINT32_MAX)
        return CUDA_ERROR_INVALID_VALUE;
      msg->shape = k2d;
      msg->format = p.format;
      msg->channels = p.numChannels;
      msg->address = p.devPtr;
      msg->width = static_cast<uint32_t>(p.width);
      msg->height = static_cast<uint32_t>(p.height);
      msg->pitch = p.pitchInBytes;
      msg->slice_pitch = p.pitchInBytes * p.height;
      return CUDA_SUCCESS;
    }
    case CU_RESOURCE_TYPE_MIPMAPPED_ARRAY:
      log_error("%s: mipmapped arrays are not supported by tally (CUDA_ERROR_NOT_SUPPORTED)",
                kind == kTexture ? "cuTexObjectCreate" : "cuSurfObjectCreate");
      return CUDA_ERROR_NOT_SUPPORTED;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult create(unsigned long long* out, uint32_t kind, const CUDA_RESOURCE_DESC* res, const CUDA_TEXTURE_DESC* tex) {
  if (out == nullptr || res == nullptr || (kind == kTexture && tex == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  protocol::TextureCreateMsg msg{};
  if (CUresult rc = describe_resource(*res, kind, &msg); rc != CUDA_SUCCESS) return rc;
  if (kind == kTexture) {
    if (tex->flags & ~kKnownTextureFlags) return CUDA_ERROR_INVALID_VALUE;
    msg.flags = tex->flags;
    msg.filter_mode = tex->filterMode;
    for (int i = 0; i < 3; ++i) msg.address_mode[i] = tex->addressMode[i];
    for (int i = 0; i < 4; ++i) msg.border[i] = tex->borderColor[i];
  }
  protocol::TextureReplyMsg reply{};
  if (CUresult rc = request_reply(msg, protocol::MessageKind::TextureReply, &reply); rc != CUDA_SUCCESS) return rc;
  TextureObject object{kind, *res, {}};
  if (tex != nullptr) object.texture = *tex;
  std::lock_guard lock(g_mutex);
  g_objects[reply.handle] = object;
  *out = reply.handle;
  return CUDA_SUCCESS;
}

CUresult destroy(uint64_t handle, uint32_t kind) {
  {
    std::lock_guard lock(g_mutex);
    auto it = g_objects.find(handle);
    if (it == g_objects.end() || it->second.kind != kind) return CUDA_ERROR_INVALID_VALUE;
    g_objects.erase(it);
  }
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  protocol::TextureDestroyMsg msg{};
  msg.handle = handle;
  return Connection::instance().request_done(msg);
}

const TextureObject* find(uint64_t handle, uint32_t kind) {
  auto it = g_objects.find(handle);
  return it == g_objects.end() || it->second.kind != kind ? nullptr : &it->second;
}

}  // namespace
}  // namespace tally::client

using namespace tally::client;

TALLY_ENTRY(cuTexObjectCreate_v5000)(CUtexObject* pTexObject, const CUDA_RESOURCE_DESC* pResDesc,
                                     const CUDA_TEXTURE_DESC* pTexDesc, const CUDA_RESOURCE_VIEW_DESC* pResViewDesc) {
  if (pResViewDesc != nullptr) {
    log_error("cuTexObjectCreate: resource views are not supported by tally (CUDA_ERROR_NOT_SUPPORTED)");
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  return create(pTexObject, kTexture, pResDesc, pTexDesc);
}

TALLY_ENTRY(cuTexObjectDestroy_v5000)(CUtexObject texObject) { return destroy(texObject, kTexture); }

TALLY_ENTRY(cuTexObjectGetResourceDesc_v5000)(CUDA_RESOURCE_DESC* pResDesc, CUtexObject texObject) {
  if (pResDesc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(g_mutex);
  const TextureObject* o = find(texObject, kTexture);
  if (o == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pResDesc = o->resource;
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuTexObjectGetTextureDesc_v5000)(CUDA_TEXTURE_DESC* pTexDesc, CUtexObject texObject) {
  if (pTexDesc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(g_mutex);
  const TextureObject* o = find(texObject, kTexture);
  if (o == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pTexDesc = o->texture;
  return CUDA_SUCCESS;
}

// No object here has a view (cuTexObjectCreate refuses them): the driver answers
// INVALID_VALUE for an object made without one.
TALLY_ENTRY(cuTexObjectGetResourceViewDesc_v5000)(CUDA_RESOURCE_VIEW_DESC* pResViewDesc, CUtexObject texObject) {
  (void)pResViewDesc;
  (void)texObject;
  return CUDA_ERROR_INVALID_VALUE;
}

TALLY_ENTRY(cuSurfObjectCreate_v5000)(CUsurfObject* pSurfObject, const CUDA_RESOURCE_DESC* pResDesc) {
  if (pResDesc != nullptr && pResDesc->resType != CU_RESOURCE_TYPE_ARRAY) return CUDA_ERROR_INVALID_VALUE;
  return create(pSurfObject, kSurface, pResDesc, nullptr);
}

TALLY_ENTRY(cuSurfObjectDestroy_v5000)(CUsurfObject surfObject) { return destroy(surfObject, kSurface); }

TALLY_ENTRY(cuSurfObjectGetResourceDesc_v5000)(CUDA_RESOURCE_DESC* pResDesc, CUsurfObject surfObject) {
  if (pResDesc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(g_mutex);
  const TextureObject* o = find(surfObject, kSurface);
  if (o == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pResDesc = o->resource;
  return CUDA_SUCCESS;
}
