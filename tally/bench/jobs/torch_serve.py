"""High-priority PyTorch job: BERT-base or ResNet-50 inference, one request at
a time at the arrival times of a trace (contract: tally/bench/jobs/job_protocol.py).

    python -m tally.bench.jobs.torch_serve --model bert-base --arrivals A --duration S --out R.json

A request copies its input to the device, runs the model and copies the
output back. Inputs cycle through a few fixed ones whose outputs were
computed on the CPU before the trace starts; every output is compared with
them (fp32, TF32 off), so wrong results under sharing are caught.
"""
from __future__ import annotations

import argparse
import copy
import sys

import torch

from tally.bench.jobs import job_protocol
from tally.bench.jobs.torch_setup import (
    add_model_arguments,
    batch_size,
    build_model,
    choose_device,
    make_input,
    precise_math,
)

DISTINCT_INPUTS = 4
TOLERANCE = {"rtol": 2e-3, "atol": 2e-3}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="torch_serve", description=__doc__.splitlines()[0])
    job_protocol.high_priority_arguments(parser)
    add_model_arguments(parser, default_batch={"bert-base": 1, "resnet50": 1})
    args = parser.parse_args(argv)
    arrivals = job_protocol.read_arrivals(args.arrivals)
    device = choose_device(args.device)
    precise_math()
    batch = batch_size(args)
    reference = build_model(args).eval()
    model = copy.deepcopy(reference).to(device)
    inputs = [make_input(args, i, batch) for i in range(DISTINCT_INPUTS)]
    with torch.inference_mode():
        expected = [reference(x) for x in inputs]
    del reference

    @torch.inference_mode()
    def serve(q: int) -> bool:
        k = q % DISTINCT_INPUTS
        out = model(inputs[k].to(device)).cpu()       # .cpu() waits for the result: the request is done
        return bool(torch.allclose(out, expected[k], **TOLERANCE))

    warm = [serve(q) for q in range(args.warmup)]      # loads kernels, picks algorithms: not timed
    report = job_protocol.serve_trace(arrivals, args.duration, args.drain, serve)
    if not all(warm):
        report["ok"] = False
        report["check"] = f"{warm.count(False)} WRONG outputs during warm-up; " + report["check"]
    report["job"] = f"torch-{args.model}"
    job_protocol.write_report(args.out, report)
    print(f"torch_serve: {args.model} batch {batch} on {device}: {len(report['end_s'])} of {len(arrivals)} "
          f"requests served, {report['check']}", flush=True)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
