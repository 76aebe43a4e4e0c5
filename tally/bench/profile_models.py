"""Inference models `tally-bench profile` can run on the sim, and batching.

Like tally/bench/workloads.py, these are kernel-level models, not measurements:
each is one request's kernels (grid, block size, per-block time). bert-base and
resnet50 are the co-location benchmark's own; the others are built the same
way to span what a fleet serves: bigger transformers whose grids fill a whole
GPU (bert-large, vit-base), smaller ones (distilbert, resnet18), a network of
many tiny kernels that launch overhead dominates (mobilenet-v2), and a
recommendation model whose MLPs are a handful of blocks and whose embedding
tables need 12 GB (dlrm-small).

A batch of b requests multiplies every kernel's grid by b (the GEMM rows, the
images, the sequences: each thread block's work stays the same), and its
copies' bytes by b. `memory_gb` (weights, tables and workspace, assumed) lets
the planner keep a model off MIG partitions that cannot hold it.
"""
from __future__ import annotations

import math
from dataclasses import replace

from tally.backends.sim.model import KernelCost
from tally.bench.workloads import INFERENCE_MODELS, InferenceModel, KernelShape


def _k(name: str, blocks: int, threads: int, block_us: float, per_sm: int) -> KernelShape:
    return KernelShape(name, blocks, threads, KernelCost(block_us, per_sm))


def _scaled_layer(model: InferenceModel, prefix: str, blocks: float, block_time: float = 1.0) -> tuple:
    """bert-base's encoder layer with grids (and optionally block times) scaled."""
    layer = model.kernels[1:8]
    return tuple(KernelShape(s.name.replace("bert.", prefix), max(1, round(s.blocks * blocks)), s.threads,
                             replace(s.cost, block_time_us=s.cost.block_time_us * block_time)) for s in layer)


def _bert_family() -> list[InferenceModel]:
    base = INFERENCE_MODELS["bert-base"]
    head, tail = base.kernels[:1], base.kernels[-2:]
    large = _scaled_layer(base, "bert_large.", 4 / 3)
    vit = _scaled_layer(base, "vit.", 197 / 128)
    return [
        InferenceModel("bert-large", head + large * 24 + tail, base.input_bytes, base.output_bytes),
        InferenceModel("distilbert", head + base.kernels[1:8] * 6 + tail, base.input_bytes, base.output_bytes),
        InferenceModel("vit-base", (_k("vit.patch_embed", 196, 256, 12.0, 2),) + vit * 12
                       + (_k("vit.head", 8, 256, 8.0, 4),), 3 * 224 * 224 * 2, 1000 * 4),
    ]


def _resnet18() -> InferenceModel:
    kernels = [_k("resnet18.stem_conv", 784, 256, 12.0, 2), _k("resnet18.maxpool", 392, 256, 4.0, 8)]
    for stage, blocks in enumerate((392, 196, 98, 49)):
        for _ in range(2):
            kernels += [_k(f"resnet18.s{stage}.conv3x3a", blocks, 256, 20.0, 2),
                        _k(f"resnet18.s{stage}.conv3x3b", blocks, 256, 20.0, 2),
                        _k(f"resnet18.s{stage}.add_relu", blocks, 256, 3.0, 8)]
    kernels += [_k("resnet18.avgpool", 64, 256, 5.0, 8), _k("resnet18.fc", 32, 256, 10.0, 4)]
    return InferenceModel("resnet18", tuple(kernels), 3 * 224 * 224 * 2, 1000 * 4)


def _mobilenet_v2() -> InferenceModel:
    kernels = [_k("mobilenet.stem", 392, 256, 6.0, 4)]
    for blocks, repeat in ((196, 3), (98, 4), (49, 6), (25, 4)):
        for _ in range(repeat):
            kernels += [_k("mobilenet.expand1x1", blocks, 256, 5.0, 4),
                        _k("mobilenet.depthwise3x3", blocks, 256, 4.0, 8),
                        _k("mobilenet.project1x1", blocks, 256, 5.0, 4)]
    kernels += [_k("mobilenet.head1x1", 49, 256, 6.0, 4), _k("mobilenet.fc", 16, 256, 6.0, 4)]
    return InferenceModel("mobilenet-v2", tuple(kernels), 3 * 224 * 224 * 2, 1000 * 4)


def _dlrm_small() -> InferenceModel:
    kernels = (_k("dlrm.embedding_gather", 64, 256, 8.0, 8),
               _k("dlrm.bottom_mlp0", 8, 256, 10.0, 4), _k("dlrm.bottom_mlp1", 16, 256, 10.0, 4),
               _k("dlrm.bottom_mlp2", 8, 256, 10.0, 4), _k("dlrm.interaction", 16, 256, 6.0, 8),
               _k("dlrm.top_mlp0", 16, 256, 10.0, 4), _k("dlrm.top_mlp1", 8, 256, 10.0, 4),
               _k("dlrm.top_mlp2", 4, 256, 8.0, 4))
    return InferenceModel("dlrm-small", kernels, 26 * 8 + 13 * 4, 4)


PROFILE_MODELS: dict[str, InferenceModel] = {m.name: m for m in (
    INFERENCE_MODELS["bert-base"], *_bert_family(), INFERENCE_MODELS["resnet50"], _resnet18(), _mobilenet_v2(),
    _dlrm_small())}

MODEL_MEMORY_GB: dict[str, float] = {
    "bert-base": 0.6, "bert-large": 1.6, "distilbert": 0.4, "vit-base": 0.5, "resnet50": 0.3, "resnet18": 0.2,
    "mobilenet-v2": 0.1, "dlrm-small": 12.0,
}


def batched(model: InferenceModel, batch: int) -> InferenceModel:
    """One batch of `batch` requests as a single request of the model."""
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    kernels = tuple(replace(k, blocks=k.blocks * batch) for k in model.kernels)
    return InferenceModel(f"{model.name}@{batch}", kernels, model.input_bytes * batch,
                          max(1, math.ceil(model.output_bytes * batch)))
