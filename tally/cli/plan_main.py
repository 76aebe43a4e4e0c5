"""tally-plan: cut GPUs into MIG instances or SM shares so every inference
service meets its throughput and p99 SLO on the fewest GPUs.

    tally-plan services.yaml                        # table: GPUs, partitions, services
    tally-plan services.yaml --format mig-parted    # NVIDIA mig-parted config for the MIG layouts
    tally-plan services.yaml --partitions sm-share --format tally-run
    tally-plan new-services.yaml --from current.json   # reconfiguration steps
    tally-plan --layouts a100-40gb                  # the legal MIG layouts

services.yaml names the GPU type, the partition kind, a profile table
("example" for the bundled one) and the services; see README.md.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tally.cli import extras

extras.require("cluster", "tally-plan")  # before the planner's imports (scipy, yaml)

from tally.cluster.planner.deployment import Deployment  # noqa: E402
from tally.cluster.planner.errors import PlanInputError
from tally.cluster.planner.files import read_structured
from tally.cluster.planner.formats import FORMATS, render
from tally.cluster.planner.gpus import GPU_TYPES, PARTITION_KINDS, gpu_type
from tally.cluster.planner.layouts import mig_layouts
from tally.cluster.planner.plan import ALGORITHMS, plan
from tally.cluster.planner.reconfigure import reconfigure
from tally.cluster.planner.services import load_request


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tally-plan", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    p.add_argument("services", nargs="?", type=Path, help="YAML or JSON file: gpu, partitions, profile, services")
    p.add_argument("--profile", help="profile table (YAML/JSON) or 'example'; overrides the file's")
    p.add_argument("--gpu", help=f"GPU type ({', '.join(GPU_TYPES)}); overrides the file's")
    p.add_argument("--partitions", choices=PARTITION_KINDS, help="MIG instances or tally SM shares")
    p.add_argument("--algorithm", choices=ALGORITHMS, default="optimizer",
                   help="optimizer: column generation + MIP (default); greedy: MIG-serving's heuristic")
    p.add_argument("--max-gpus", type=int, help="GPU budget; an error if the services need more")
    p.add_argument("--time-limit", type=float, default=60.0, help="seconds for the optimizer (default: %(default)s)")
    p.add_argument("--format", choices=FORMATS, default="table", help="output (default: %(default)s)")
    p.add_argument("-o", "--output", type=Path, help="write here instead of stdout")
    p.add_argument("--gpus-per-node", type=int, help="number GPUs per node in mig-parted / tally-run output")
    p.add_argument("--from", dest="current", type=Path,
                   help="current deployment (a `--format json` output): plan the move to the new services")
    p.add_argument("--no-compare", action="store_true", help="skip the whole-GPU, all-smallest and greedy plans")
    p.add_argument("--layouts", metavar="GPU", help="print the legal MIG layouts of a GPU type and exit")
    return p


def _layouts(gpu: str) -> str:
    layouts = mig_layouts(gpu_type(gpu))
    distinct = len({layout.sizes for layout in layouts})
    lines = [f"{len(layouts)} full MIG layouts of {gpu} ({distinct} distinct size sets); instance@first memory slice:"]
    for layout in layouts:
        lines.append("  " + "  ".join(f"{gpu_type(gpu).mig_profile(p.partition).name}@{p.start}"
                                      for p in layout.parts))
    return "\n".join(lines) + "\n"


def _reconfiguration_text(result) -> str:
    s = result.summary
    lines = [f"reconfiguration: {s['gpus_before']} -> {s['gpus_after']} GPUs (fresh optimum {s['fresh_optimum']}); "
             f"touched {s['touched']} (changed {s['changed']}, new {s['new_machines']}, borrowed spares "
             f"{s['borrowed']}), kept {s['kept']} as they are; every service at or above min(old, new) throughput "
             f"throughout: {'yes' if s['floors_met'] else 'NO'}"]
    lines += [f"  {k + 1:>3}. {step.describe()}" for k, step in enumerate(result.steps)]
    return "\n".join(lines) + "\n\n"


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.layouts:
            out = _layouts(args.layouts)
        else:
            if args.services is None:
                raise PlanInputError("name a services file (see tally-plan --help)")
            if args.gpus_per_node is not None and args.gpus_per_node < 1:
                raise PlanInputError(f"--gpus-per-node must be >= 1, got {args.gpus_per_node}")
            if not args.time_limit > 0:
                raise PlanInputError(f"--time-limit must be > 0 s, got {args.time_limit}")
            request = load_request(args.services, args.gpu, args.partitions, args.profile, args.max_gpus)
            if args.current:
                current = Deployment.from_dict(read_structured(args.current, "current deployment"), str(args.current))
                result = reconfigure(current, request, args.time_limit)
                deployment = result.target
                out = (json.dumps(result.to_dict(), indent=1) + "\n" if args.format == "json"
                       else (_reconfiguration_text(result) if args.format == "table" else "")
                       + (render(deployment, args.format, args.gpus_per_node) if args.format != "json" else ""))
            else:
                deployment = plan(request, args.algorithm, args.time_limit, compare=not args.no_compare)
                out = render(deployment, args.format, args.gpus_per_node)
    except PlanInputError as e:
        print(f"tally-plan: {e}", file=sys.stderr)
        return 2
    if args.output:
        args.output.write_text(out)
    else:
        sys.stdout.write(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
