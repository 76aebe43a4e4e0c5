// SM resources for green contexts: what the job may use (asked from the server:
// its tally share, else the device), split into groups, and described for
// cuGreenCtxCreate. The splits are the client's arithmetic on the partition rules
// the server reports (sm.minSmPartitionSize, sm.smCoscheduledAlignment); which SMs a
// group gets is the server's business, so a resource is only a count of SMs.
//
// A resource keeps, in the internal bytes CUDA reserves in CUdevResource, which
// split made it: CUDA lets several resources make one descriptor only when they
// come from the same split, and refuses to split a split's output again.
#include <algorithm>
#include <cstring>
#include <set>

#include "connection/connection.h"
#include "contexts/contexts.h"
#include "contexts/green_contexts.h"
#include "entry_points/entry_point.h"
#include "logging/log.h"

namespace tally::client {
namespace {

constexpr uint32_t kResourceMagic = 0x524d5354;  // "TSMR"
// CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING treats SMs one by one, without their
// hierarchy; tally models that as the finest partitions CUDA documents (2 SMs, pairs).
constexpr unsigned kUncoscheduledGranularity = 2;
constexpr unsigned kKnownSplitFlags =
    CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING | CU_DEV_SM_RESOURCE_SPLIT_MAX_POTENTIAL_CLUSTER_SIZE;

std::atomic<uint64_t> g_next_split{1};

// tally's bytes in a CUdevResource's internal padding.
struct ResourceMark {
  uint32_t magic;
  int32_t device;
  uint64_t split;  // the split that made it; 0: a whole resource (splittable)
  uint32_t part;   // within its split: groups 1.., the remainder 0
  uint32_t reserved;
};
static_assert(sizeof(ResourceMark) <= sizeof(CUdevResource{}._internal_padding), "ResourceMark does not fit");

void fill(CUdevResource* out, CUdevice device, unsigned sm_count, unsigned min_partition, unsigned alignment,
          uint64_t split, uint32_t part) {
  std::memset(out, 0, sizeof *out);
  out->type = CU_DEV_RESOURCE_TYPE_SM;
  out->sm.smCount = sm_count;
  out->sm.minSmPartitionSize = min_partition;
  out->sm.smCoscheduledAlignment = alignment;
  const ResourceMark mark{kResourceMagic, device, split, part, 0};
  std::memcpy(out->_internal_padding, &mark, sizeof mark);
}

bool read_mark(const CUdevResource* r, ResourceMark* mark) {
  std::memcpy(mark, r->_internal_padding, sizeof *mark);
  return mark->magic == kResourceMagic;
}

// The SMs the job may use now, from the server.
CUresult job_sm_resource(CUdevice device, CUdevResource* out) {
  protocol::SmResourceReplyMsg reply{};
  if (CUresult rc = request_reply(protocol::SmResourceQueryMsg{}, protocol::MessageKind::SmResourceReply, &reply);
      rc != CUDA_SUCCESS)
    return rc;
  fill(out, device, reply.sm_count, reply.min_partition, reply.alignment, 0, 0);
  return CUDA_SUCCESS;
}

CUresult check_query(CUdevResource* resource, CUdevResourceType type) {
  if (resource == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return type == CU_DEV_RESOURCE_TYPE_SM ? CUDA_SUCCESS : CUDA_ERROR_INVALID_RESOURCE_TYPE;
}

unsigned round_up(unsigned value, unsigned multiple) { return (value + multiple - 1) / multiple * multiple; }

}  // namespace

void fill_sm_resource(CUdevResource* out, CUdevice device, unsigned sm_count, unsigned min_partition,
                      unsigned alignment) {
  fill(out, device, sm_count, min_partition, alignment, 0, 0);
}

}  // namespace tally::client

using namespace tally::client;

TALLY_ENTRY(cuDeviceGetDevResource_v12040)(CUdevice dev, CUdevResource* resource, CUdevResourceType type) {
  if (CUresult rc = check_device(dev); rc != CUDA_SUCCESS) return rc;
  if (CUresult rc = check_query(resource, type); rc != CUDA_SUCCESS) return rc;
  return job_sm_resource(dev, resource);
}

TALLY_ENTRY(cuCtxGetDevResource_v12040)(CUcontext hCtx, CUdevResource* resource, CUdevResourceType type) {
  ContextObject* c = nullptr;
  if (CUresult rc = context_object(hCtx, &c); rc != CUDA_SUCCESS) return rc;
  if (CUresult rc = check_query(resource, type); rc != CUDA_SUCCESS) return rc;
  if (GreenContextObject* g = c->green; g != nullptr) {
    fill(resource, g->device, g->sm_count, g->min_partition, g->alignment, 0, 0);
    return CUDA_SUCCESS;
  }
  return job_sm_resource(c->device, resource);
}

TALLY_ENTRY(cuDevSmResourceSplitByCount_v12040)(CUdevResource* result, unsigned int* nbGroups,
                                                const CUdevResource* input, CUdevResource* remaining,
                                                unsigned int useFlags, unsigned int minCount) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  if (nbGroups == nullptr || input == nullptr || (result != nullptr && *nbGroups == 0)) return CUDA_ERROR_INVALID_VALUE;
  if (input->type != CU_DEV_RESOURCE_TYPE_SM) return CUDA_ERROR_INVALID_RESOURCE_TYPE;
  ResourceMark from{};
  if (!read_mark(input, &from)) return CUDA_ERROR_INVALID_VALUE;  // not made by cu*GetDevResource
  if (from.split != 0) {
    log_error("cuDevSmResourceSplitByCount: a group of a split cannot be split again; create a green context "
              "from it and split what cuGreenCtxGetDevResource returns");
    return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
  }
  if ((useFlags & ~kKnownSplitFlags) != 0) return CUDA_ERROR_INVALID_VALUE;
  if ((useFlags & CU_DEV_SM_RESOURCE_SPLIT_MAX_POTENTIAL_CLUSTER_SIZE) && Connection::instance().device().cc_major < 9)
    return CUDA_ERROR_INVALID_VALUE;  // compute capability 9.0+ only
  const unsigned available = input->sm.smCount;
  if (minCount > available) return CUDA_ERROR_INVALID_VALUE;
  unsigned minimum = std::max(1u, input->sm.minSmPartitionSize);
  unsigned alignment = std::max(1u, input->sm.smCoscheduledAlignment);
  if (useFlags & CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING) {
    minimum = std::min(minimum, kUncoscheduledGranularity);
    alignment = std::min(alignment, kUncoscheduledGranularity);
  }
  const unsigned size = round_up(std::max(minCount, minimum), alignment);
  const unsigned possible = available / size;
  if (possible == 0) {
    log_error("cuDevSmResourceSplitByCount: a group of at least %u SMs (minCount rounded to partitions of at least "
              "%u SMs in multiples of %u) does not fit in %u SMs", size, minimum, alignment, available);
    return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
  }
  const unsigned groups = result == nullptr ? possible : std::min(*nbGroups, possible);
  const uint64_t split = g_next_split.fetch_add(1, std::memory_order_relaxed);
  for (unsigned i = 0; result != nullptr && i < groups; ++i) fill(&result[i], from.device, size, minimum, alignment, split, i + 1);
  if (remaining != nullptr) fill(remaining, from.device, available - groups * size, minimum, alignment, split, 0);
  *nbGroups = groups;
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuDevResourceGenerateDesc_v12040)(CUdevResourceDesc* phDesc, CUdevResource* resources,
                                              unsigned int nbResources) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  if (phDesc == nullptr || resources == nullptr || nbResources == 0) return CUDA_ERROR_INVALID_VALUE;
  ResourceMark first{};
  std::set<uint32_t> parts;
  unsigned sm_count = 0;
  for (unsigned i = 0; i < nbResources; ++i) {
    ResourceMark mark{};
    if (resources[i].type != CU_DEV_RESOURCE_TYPE_SM) return CUDA_ERROR_INVALID_RESOURCE_TYPE;
    if (!read_mark(&resources[i], &mark)) return CUDA_ERROR_INVALID_VALUE;
    if (i == 0) first = mark;
    if (nbResources > 1 && (mark.split == 0 || mark.split != first.split || !parts.insert(mark.part).second)) {
      log_error("cuDevResourceGenerateDesc: resources described together must be different outputs of one split");
      return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
    }
    sm_count += resources[i].sm.smCount;
  }
  if (sm_count == 0) return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
  auto* desc = new ResourceDescObject();  // valid for the life of the process, as CUDA's
  desc->device = first.device;
  desc->sm_count = sm_count;
  desc->min_partition = resources[0].sm.minSmPartitionSize;
  desc->alignment = resources[0].sm.smCoscheduledAlignment;
  *phDesc = reinterpret_cast<CUdevResourceDesc>(desc);
  return CUDA_SUCCESS;
}
