"""A PyTorch allocator (chosen with PYTORCH_CUDA_ALLOC_CONF) under tally-run:
tensors of several sizes copied in and out, memory statistics, the cache
emptied, then used again. Prints one JSON line."""
import json

import torch

sizes = (1000, 3 << 20, 10 << 20)
tensors = [torch.arange(n, dtype=torch.float32).cuda() for n in sizes]
results = {"roundtrips": [torch.equal(t.cpu(), torch.arange(t.numel(), dtype=torch.float32)) for t in tensors],
           "reserved_mib": torch.cuda.memory_reserved() >> 20,
           "backend": torch.cuda.get_allocator_backend(),
           "stats": len(torch.cuda.memory_stats()) > 0}
del tensors
torch.cuda.empty_cache()
results["reserved_after_empty_cache"] = torch.cuda.memory_reserved()
again = torch.arange(5 << 20, dtype=torch.float32).cuda()
results["after_reuse"] = torch.equal(again.cpu(), torch.arange(5 << 20, dtype=torch.float32))
print(json.dumps(results))
