"""Kernel-level shapes of the jobs the co-location benchmark simulates.

These are models, not measurements: each job is a fixed sequence of kernels
with grid sizes, block sizes and per-block times (tally.backends.sim.model
KernelCost) chosen to reproduce what matters for scheduling, as the Tally paper
describes its workloads on an A100 (108 SMs):
- inference requests are a few milliseconds of many short kernels (each at most
  a couple of waves, tens of microseconds);
- Whisper training has many kernels of several milliseconds, longer than a
  whole inference request, which is exactly what hurts a latency-critical job
  under kernel-granularity scheduling;
- GPT-style training has shorter kernels, some of them cubin-only library
  GEMMs (cuBLAS) that cannot be transformed.
Per-block times are within what GEMM / attention tiles take on such GPUs (5 to
60 us); a few are deliberately above the 31.6 us turnaround threshold, so the
profiler also has to handle kernels no configuration brings under it.
"""
from __future__ import annotations

from dataclasses import dataclass

from tally.backends.sim.model import KernelCost


@dataclass(frozen=True)
class KernelShape:
    name: str
    blocks: int
    threads: int
    cost: KernelCost


@dataclass(frozen=True)
class InferenceModel:
    name: str
    kernels: tuple[KernelShape, ...]        # one request, in order
    input_bytes: int
    output_bytes: int


@dataclass(frozen=True)
class TrainingModel:
    name: str
    kernels: tuple[KernelShape, ...]        # one iteration, in order
    batch_bytes: int


def _k(name: str, blocks: int, threads: int, block_us: float, per_sm: int,
       transformable: bool = True) -> KernelShape:
    return KernelShape(name, blocks, threads, KernelCost(block_us, per_sm, transformable))


def _bert_base() -> InferenceModel:
    layer = (
        _k("bert.qkv_gemm", 288, 256, 20.0, 2),
        _k("bert.attention", 96, 128, 30.0, 4),
        _k("bert.out_gemm", 96, 256, 18.0, 2),
        _k("bert.layernorm", 128, 128, 6.0, 8),
        _k("bert.ffn_up_gelu", 384, 256, 22.0, 2),
        _k("bert.ffn_down", 192, 256, 30.0, 2),
        _k("bert.layernorm", 128, 128, 6.0, 8),
    )
    kernels = (_k("bert.embedding", 128, 128, 10.0, 8),) + layer * 12 + (
        _k("bert.pooler", 8, 256, 8.0, 4), _k("bert.classifier", 4, 128, 5.0, 8))
    return InferenceModel("bert-base", kernels, input_bytes=8 * 128 * 8, output_bytes=8 * 2 * 4)


def _resnet50() -> InferenceModel:
    kernels = [_k("resnet.stem_conv", 784, 256, 12.0, 2), _k("resnet.maxpool", 392, 256, 4.0, 8)]
    for stage, (blocks, repeat) in enumerate(((392, 3), (196, 4), (98, 6), (49, 3))):
        for _ in range(repeat):
            kernels += [_k(f"resnet.s{stage}.conv1x1a", blocks, 256, 14.0, 2),
                        _k(f"resnet.s{stage}.conv3x3", blocks, 256, 22.0, 2),
                        _k(f"resnet.s{stage}.conv1x1b", blocks, 256, 14.0, 2),
                        _k(f"resnet.s{stage}.add_relu", blocks, 256, 3.0, 8)]
    kernels += [_k("resnet.avgpool", 64, 256, 5.0, 8), _k("resnet.fc", 32, 256, 10.0, 4)]
    return InferenceModel("resnet50", tuple(kernels), input_bytes=8 * 3 * 224 * 224, output_bytes=8 * 1000 * 4)


def _whisper_train() -> TrainingModel:
    group_fwd = (
        _k("whisper.gemm_fwd", 43200, 256, 24.0, 2),
        _k("whisper.attn_fwd", 8640, 128, 40.0, 4),
        _k("whisper.mlp_fwd", 21600, 256, 24.0, 2),
        _k("whisper.elementwise", 27000, 256, 3.0, 8),
        _k("whisper.cublas_proj", 216, 256, 20.0, 2, transformable=False),
    )
    group_bwd = (
        _k("whisper.elementwise_bwd", 27000, 256, 3.0, 8),
        _k("whisper.mlp_dgrad", 21600, 256, 24.0, 2),
        _k("whisper.attn_bwd", 8640, 128, 55.0, 2),
        _k("whisper.gemm_dgrad", 43200, 256, 24.0, 2),
        _k("whisper.gemm_wgrad", 43200, 256, 26.0, 2),
        _k("whisper.cublas_proj_bwd", 216, 256, 20.0, 2, transformable=False),
    )
    kernels = group_fwd * 4 + group_bwd * 4 + (_k("whisper.adam", 10800, 512, 8.0, 4),)
    return TrainingModel("whisper-train", kernels, batch_bytes=16 * 80 * 3000 * 2)


def _gpt_train() -> TrainingModel:
    layer_fwd = (
        _k("gpt.qkv_gemm", 6912, 256, 18.0, 2),
        _k("gpt.flash_attn_fwd", 3456, 128, 28.0, 4),
        _k("gpt.cublas_out_proj", 2304, 256, 16.0, 2, transformable=False),
        _k("gpt.mlp_up", 9216, 256, 18.0, 2),
        _k("gpt.gelu", 18432, 256, 2.0, 8),
        _k("gpt.mlp_down", 9216, 256, 18.0, 2),
    )
    layer_bwd = (
        _k("gpt.mlp_down_bwd", 18432, 256, 18.0, 2),
        _k("gpt.gelu_bwd", 18432, 256, 2.0, 8),
        _k("gpt.mlp_up_bwd", 18432, 256, 18.0, 2),
        _k("gpt.cublas_out_proj_bwd", 2304, 256, 16.0, 2, transformable=False),
        _k("gpt.flash_attn_bwd", 3456, 128, 45.0, 2),
        _k("gpt.qkv_bwd", 13824, 256, 18.0, 2),
    )
    kernels = layer_fwd * 6 + layer_bwd * 6 + (_k("gpt.adam", 5400, 512, 8.0, 4),)
    return TrainingModel("gpt-train", kernels, batch_bytes=8 * 1024 * 8)


INFERENCE_MODELS: dict[str, InferenceModel] = {m.name: m for m in (_bert_base(), _resnet50())}
TRAINING_MODELS: dict[str, TrainingModel] = {m.name: m for m in (_whisper_train(), _gpt_train())}
