"""Best-effort PyTorch job: BERT-base (AdamW) or ResNet-50 (SGD with momentum)
training on one fixed random batch, until told to stop (contract:
tally/bench/jobs/job_protocol.py).

    python -m tally.bench.jobs.torch_train --model bert-base --out R.json --stop FILE --ready FILE

With --compile the model runs through torch.compile: Inductor writes Triton kernels
for its pointwise and reduction work (compiled at run time, so under tally-run they
reach the server with their PTX through JIT capture and can be sliced or preempted;
with tally-run --no-jit-capture they run whole). The first step compiles, so the
job is ready only after it.

An iteration is forward, cross-entropy loss, backward, optimizer step and
`loss.item()` (the synchronization a training loop has every step). Checks:
the first step's loss equals the CPU's for the same weights and batch (fp32,
TF32 off); every loss is finite; after 10 or more steps on the same batch the
loss has fallen below the first one.
"""
from __future__ import annotations

import argparse
import copy
import math
import sys

import torch
from torch import nn

from tally.bench.jobs import job_protocol
from tally.bench.jobs.torch_setup import (
    add_model_arguments,
    batch_size,
    build_model,
    choose_device,
    make_input,
    precise_math,
)

CLASSES = {"bert-base": 2, "resnet50": 1000}


def optimizer_for(model_name: str, model: nn.Module) -> torch.optim.Optimizer:
    if model_name == "bert-base":
        return torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    return torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)


def check(losses: list[float], cpu_first_loss: float) -> tuple[bool, str]:
    first = losses[0]
    if not all(math.isfinite(x) for x in losses):
        return False, "a loss is not finite"
    if not math.isclose(first, cpu_first_loss, rel_tol=1e-3, abs_tol=1e-4):
        return False, f"first loss {first:.6f} differs from the CPU's {cpu_first_loss:.6f}"
    text = f"first loss {first:.4f} equals the CPU's; {len(losses)} steps"
    if len(losses) >= 10:
        last = min(losses[-3:])
        if not last < first:
            return False, text + f", but the loss did not fall ({last:.4f})"
        text += f", loss fell to {last:.4f}"
    return True, text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="torch_train", description=__doc__.splitlines()[0])
    job_protocol.best_effort_arguments(parser)
    add_model_arguments(parser, default_batch={"bert-base": 8, "resnet50": 32})
    parser.add_argument("--compile", action="store_true", help="train the torch.compile'd model (Inductor)")
    args = parser.parse_args(argv)
    device = choose_device(args.device)
    precise_math()
    batch = batch_size(args)
    cpu_model = build_model(args).train()
    inputs = make_input(args, 0, batch)
    labels = torch.randint(CLASSES[args.model], (batch,), generator=torch.Generator().manual_seed(7))
    loss_fn = nn.CrossEntropyLoss()
    with torch.no_grad():
        cpu_first_loss = loss_fn(copy.deepcopy(cpu_model)(inputs), labels).item()
    model = cpu_model.to(device)
    optimizer = optimizer_for(args.model, model)
    forward = torch.compile(model) if args.compile else model
    x, y = inputs.to(device), labels.to(device)
    losses: list[float] = []

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(forward(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())

    report = job_protocol.train_until_stopped(step, args.stop, args.ready, args.max_steps)
    ok, text = check(losses, cpu_first_loss)
    report.update(job=f"torch-{args.model}-train{'-compiled' if args.compile else ''}", ok=ok, check=text,
                  losses=losses)
    job_protocol.write_report(args.out, report)
    print(f"torch_train: {args.model}{' (torch.compile)' if args.compile else ''} batch {batch} on {device}: {text}: "
          f"{'results correct' if ok else 'WRONG RESULTS'}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
