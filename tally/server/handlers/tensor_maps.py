"""TMA tensor maps (cuTensorMapEncodeTiled/Im2col/Im2colWide, cuTensorMapReplaceAddress):
the backend encodes them, so a job on a GPU gets the driver's own 128 bytes for its
device addresses, and the emulator's TMA copies read tally's layout
(tally/backends/tensor_maps.py). Bad input: CUDA_ERROR_INVALID_VALUE with the reason."""
from __future__ import annotations

from tally.backends.tensor_maps import TensorMapRequest
from tally.protocol.messages_generated import TensorMapEncode, TensorMapReplaceAddress, TensorMapReply
from tally.server.job import Job


def tensor_map_encode(job: Job, msg: TensorMapEncode, tag: int) -> TensorMapReply:
    return TensorMapReply(map=job.backend.tensor_map_encode(TensorMapRequest.from_message(msg)))


def tensor_map_replace_address(job: Job, msg: TensorMapReplaceAddress, tag: int) -> TensorMapReply:
    return TensorMapReply(map=job.backend.tensor_map_replace_address(bytes(msg.map), msg.global_address))


HANDLERS = {TensorMapEncode: tensor_map_encode, TensorMapReplaceAddress: tensor_map_replace_address}
