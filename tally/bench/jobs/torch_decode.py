"""High-priority PyTorch job: a GPT-2-sized decoder (random weights, nothing
downloaded) served by replaying a CUDA graph, one request at a time at the
arrival times of a trace (contract: tally/bench/jobs/job_protocol.py).

    python -m tally.bench.jobs.torch_decode --arrivals A --duration S --out R.json

The model is GPT-2 small's shape: token and position embeddings, 12 pre-norm
causal transformer layers (hidden 768, 12 heads, feed-forward 3072, GELU), a
final LayerNorm and the tied output projection; a request is the logits of the
next token after a fixed-length context. The forward pass is captured once as
a CUDA graph (after warm-up on a side stream, as PyTorch requires) and each
request copies its context in, replays the graph and copies the logits out:
the graph-replay path of serving stacks, which a driver stand-in must carry.
Outputs are compared with the CPU's (fp32, TF32 off), so wrong results under
sharing are caught.
"""
from __future__ import annotations

import argparse
import copy
import sys

import torch
from torch import nn

from tally.bench.jobs import job_protocol
from tally.bench.jobs.torch_setup import choose_device, precise_math

DISTINCT_INPUTS = 4
TOLERANCE = {"rtol": 2e-3, "atol": 2e-3}
GPT2_VOCAB = 50257


class Gpt2Decoder(nn.Module):
    def __init__(self, layers: int = 12, hidden: int = 768, heads: int = 12, vocab: int = GPT2_VOCAB,
                 positions: int = 1024):
        super().__init__()
        self.token = nn.Embedding(vocab, hidden)
        self.position = nn.Embedding(positions, hidden)
        layer = nn.TransformerEncoderLayer(hidden, heads, 4 * hidden, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, vocab, bias=False)
        self.head.weight = self.token.weight          # GPT-2 ties the output projection to the embedding
        self.register_buffer("causal", nn.Transformer.generate_square_subsequent_mask(positions),
                             persistent=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        n = ids.shape[1]
        x = self.token(ids) + self.position(torch.arange(n, device=ids.device))
        x = self.blocks(x, mask=self.causal[:n, :n], is_causal=True)
        return self.head(self.norm(x[:, -1]))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", choices=("gpt2",), default="gpt2")
    parser.add_argument("--device", default="cuda", help="torch device (default cuda; cpu checks the script "
                                                         "without graphs)")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--context", type=int, default=128, help="tokens of context per request")
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--eager", action="store_true", help="serve without a CUDA graph (the same kernels, "
                                                             "launched one by one): tells graph faults from others")


def build(args: argparse.Namespace) -> Gpt2Decoder:
    if args.hidden % args.heads or args.batch < 1 or not 1 <= args.context <= 1024:
        raise SystemExit("--hidden must be a multiple of --heads, --batch >= 1 and --context in 1..1024")
    torch.manual_seed(0)
    return Gpt2Decoder(layers=args.layers, hidden=args.hidden, heads=args.heads)


def context(args: argparse.Namespace, index: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(2000 + index)
    return torch.randint(GPT2_VOCAB, (args.batch, args.context), generator=g)


def graphed(model: nn.Module, example: torch.Tensor):
    """(static input, static output, replay) of `model` captured as a CUDA graph."""
    static_in = example.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.inference_mode():
        for _ in range(3):                     # warm-up outside capture: kernels load, algorithms are picked
            model(static_in)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.inference_mode(), torch.cuda.graph(graph):
        static_out = model(static_in)
    return static_in, static_out, graph.replay


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="torch_decode", description=__doc__.splitlines()[0])
    job_protocol.high_priority_arguments(parser)
    add_arguments(parser)
    args = parser.parse_args(argv)
    arrivals = job_protocol.read_arrivals(args.arrivals)
    device = choose_device(args.device)
    precise_math()
    reference = build(args).eval()
    model = copy.deepcopy(reference).to(device).eval()
    inputs = [context(args, i) for i in range(DISTINCT_INPUTS)]
    with torch.inference_mode():
        expected = [reference(x) for x in inputs]
    del reference
    graphs = device.type == "cuda" and not args.eager
    if graphs:
        static_in, static_out, replay = graphed(model, inputs[0].to(device))
    else:                                      # the same steps, run eagerly (always on the CPU)
        static_in = inputs[0].clone().to(device)
        static_out = None

        def replay() -> None:
            nonlocal static_out
            with torch.inference_mode():
                static_out = model(static_in)

    def serve(q: int) -> bool:
        k = q % DISTINCT_INPUTS
        static_in.copy_(inputs[k])
        replay()
        out = static_out.cpu()                 # waits for the replay: the request is done
        return bool(torch.allclose(out, expected[k], **TOLERANCE))

    warm = [serve(q) for q in range(args.warmup)]
    report = job_protocol.serve_trace(arrivals, args.duration, args.drain, serve)
    if not all(warm):
        report["ok"] = False
        report["check"] = f"{warm.count(False)} WRONG outputs during warm-up; " + report["check"]
    report["job"] = "torch-gpt2-graphs"
    job_protocol.write_report(args.out, report)
    print(f"torch_decode: gpt2 batch {args.batch} context {args.context} on {device}"
          f"{' (CUDA graph replay)' if graphs else ''}: {len(report['end_s'])} of {len(arrivals)} "
          f"requests served, {report['check']}", flush=True)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
