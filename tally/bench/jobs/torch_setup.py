"""Shared set-up of the PyTorch jobs: model choice and sizes, inputs, device."""
from __future__ import annotations

import argparse

import torch

from tally.bench.jobs.torch_models import BertEncoder, ResNet50

MODELS = ("bert-base", "resnet50")
VOCAB = 30522


def add_model_arguments(parser: argparse.ArgumentParser, default_batch: dict[str, int]) -> None:
    parser.add_argument("--model", choices=MODELS, required=True)
    parser.add_argument("--device", default="cuda", help="torch device (default cuda; cpu to check the script)")
    parser.add_argument("--batch", type=int, help=f"batch size (default {default_batch})")
    bert = parser.add_argument_group("bert-base sizes (defaults: BERT-base)")
    bert.add_argument("--layers", type=int, default=12)
    bert.add_argument("--hidden", type=int, default=768)
    bert.add_argument("--heads", type=int, default=12)
    bert.add_argument("--seq", type=int, default=128)
    parser.add_argument("--image-size", type=int, default=224, help="resnet50 input height and width")
    parser.set_defaults(default_batch=default_batch)


def batch_size(args: argparse.Namespace) -> int:
    batch = args.batch or args.default_batch[args.model]
    if batch < 1:
        raise SystemExit(f"--batch must be >= 1, got {batch}")
    return batch


def choose_device(name: str) -> torch.device:
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit(f"device {name!r} requested but torch sees no CUDA device (torch {torch.__version__}, "
                         f"CUDA build {torch.version.cuda}); under tally-run the GPU is the server's. "
                         f"Use --device cpu to check the script without a GPU")
    return device


def precise_math() -> None:
    """fp32 matmuls and convolutions without TF32, so a device's results can be
    compared with the CPU's at a tight tolerance."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


def build_model(args: argparse.Namespace) -> torch.nn.Module:
    torch.manual_seed(0)
    if args.model == "bert-base":
        if args.hidden % args.heads:
            raise SystemExit(f"--hidden {args.hidden} must be a multiple of --heads {args.heads}")
        return BertEncoder(layers=args.layers, hidden=args.hidden, heads=args.heads)
    return ResNet50()


def make_input(args: argparse.Namespace, index: int, batch: int) -> torch.Tensor:
    """Input number `index` (on the CPU), the same in every process."""
    g = torch.Generator().manual_seed(1000 + index)
    if args.model == "bert-base":
        return torch.randint(VOCAB, (batch, args.seq), generator=g)
    return torch.randn(batch, 3, args.image_size, args.image_size, generator=g)
