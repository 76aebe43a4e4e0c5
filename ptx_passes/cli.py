"""Command line of the PTX toolkit (`python -m ptx_passes`).

    roundtrip IN.ptx [-o OUT.ptx]        parse and print back (checks the parser on a file)
    params INPUT                         each kernel's parameter offsets, sizes and total;
                                         INPUT is PTX, a cubin, a fatbin or a host ELF
    extract BINARY_OR_FATBIN -o DIR      write every PTX and cubin entry to DIR
    transform --pass P IN.ptx [-o OUT]   add each kernel's variant for pass P (slicing,
                                         unified-sync, ptb; repeatable) via ptx_passes.pipeline;
                                         variants made and refusals are listed on stderr

Exit status: 0 on success, 1 on bad input or a missing component (one line on
stderr: `file:line:col: message` for PTX errors), 2 on bad usage.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .errors import PtxParseError
from .params import param_layout
from .parser import parse_module
from .printer import print_module

PASS_NAMES = ("slicing", "unified-sync", "ptb", "ptb-raw")
_ELF_MAGIC = b"\x7fELF"
_FATBIN_MAGIC = b"\x50\xed\x55\xba"


class CliError(Exception):
    """A one-line message for the user; main() prints it and exits with status 1."""


def main(argv: list[str] | None = None) -> int:
    args = _argument_parser().parse_args(argv)
    try:
        return args.run(args)
    except CliError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except PtxParseError as exc:
        print(f"error: {exc.one_line()}", file=sys.stderr)
        return 1


def _argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m ptx_passes",
                                     description="PTX toolkit: parse, print, inspect and rewrite kernels.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("roundtrip", help="parse a PTX file and print it back")
    p.add_argument("input", type=Path, metavar="IN.ptx")
    p.add_argument("-o", "--output", type=Path, default=None, metavar="OUT.ptx",
                   help="where to write (default: standard output)")
    p.set_defaults(run=_roundtrip)

    p = sub.add_parser("params", help="kernel parameter layouts of PTX, cubin, fatbin or host ELF")
    p.add_argument("input", type=Path, metavar="INPUT")
    p.set_defaults(run=_params)

    p = sub.add_parser("extract", help="write each PTX and cubin entry of a binary or fatbin")
    p.add_argument("input", type=Path, metavar="BINARY_OR_FATBIN")
    p.add_argument("-o", "--output", type=Path, required=True, metavar="DIR")
    p.set_defaults(run=_extract)

    p = sub.add_parser("transform", help="rewrite the kernels of a PTX file")
    p.add_argument("--pass", dest="passes", action="append", required=True, choices=PASS_NAMES,
                   help="pass to apply (repeatable; ptb applies unified-sync first)")
    p.add_argument("input", type=Path, metavar="IN.ptx")
    p.add_argument("-o", "--output", type=Path, default=None, metavar="OUT.ptx")
    p.set_defaults(run=_transform)
    return parser


# ---------------------------------------------------------------------------- commands


def _roundtrip(args) -> int:
    module = parse_module(_read_text(args.input), str(args.input))
    _write_text(args.output, print_module(module))
    return 0


def _params(args) -> int:
    data = _read_bytes(args.input)
    if data[:4] in (_ELF_MAGIC, _FATBIN_MAGIC):
        _binary_params(args.input)
    else:
        module = parse_module(_decode(data, args.input), str(args.input))
        _print_ptx_params(module)
    return 0


def _print_ptx_params(module) -> None:
    entries = module.entries()
    if not entries:
        print("(no kernels)")
    for entry in entries:
        try:
            slots = param_layout(entry)
        except ValueError as exc:
            raise CliError(f"kernel {entry.name}: {exc}") from None
        total = slots[-1].offset + slots[-1].size if slots else 0
        print(f"{entry.name}: {len(slots)} params, {total} bytes")
        for i, (param, slot) in enumerate(zip(entry.params, slots)):
            dims = "".join(f"[{d}]" for d in param.array_dims)
            print(f"  {i:3d}  offset {slot.offset:5d}  size {slot.size:5d}  align {slot.align:3d}"
                  f"  .{param.type}{dims}  {param.name}")


def _binary_params(path: Path) -> None:
    fatbin = _optional("fatbin", "reading cubins and fatbins")
    cubin_info = _optional("cubin_info", "reading cubin parameter layouts")
    try:
        entries = fatbin.read_fatbin_entries(path)
    except ValueError as exc:
        raise CliError(f"{path}: {exc}") from None
    if not entries:
        raise CliError(f"{path}: no PTX or cubin entries")
    for entry in entries:
        print(f"== {entry.kind} sm_{entry.arch}")
        if entry.kind == "ptx":
            _print_ptx_params(parse_module(_decode(entry.payload, path), f"{path}[sm_{entry.arch}.ptx]"))
            continue
        try:
            layouts = cubin_info.kernel_params(entry.payload)
        except ValueError as exc:
            raise CliError(f"{path}: {exc}") from None
        for name, slots in layouts.items():
            total = max((o + s for o, s in slots), default=0)
            print(f"{name}: {len(slots)} params, {total} bytes")
            for i, (offset, size) in enumerate(slots):
                print(f"  {i:3d}  offset {offset:5d}  size {size:5d}")


def _extract(args) -> int:
    fatbin = _optional("fatbin", "extracting fatbin entries")
    try:
        written = fatbin.extract(args.input, args.output)
    except OSError as exc:
        raise CliError(f"{args.input}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise CliError(f"{args.input}: {exc}") from None
    for path in written:
        print(path)
    if not written:
        raise CliError(f"{args.input}: no PTX or cubin entries to extract")
    return 0


def _transform(args) -> int:
    module = parse_module(_read_text(args.input), str(args.input))
    pipeline = _optional("pipeline", "the kernel transformations")
    result = pipeline.transform_module(module, list(dict.fromkeys(args.passes)))
    _write_text(args.output, print_module(result.module))
    # What became of each kernel goes to stderr, so stdout can carry the PTX.
    for name, report in result.kernels.items():
        for pass_name, variant in report.variants.items():
            print(f"{name}: {pass_name} -> {variant}", file=sys.stderr)
        for pass_name, reasons in report.refusals.items():
            print(f"{name}: {pass_name} refused: {'; '.join(reasons)}", file=sys.stderr)
    return 0


# ---------------------------------------------------------------------------- helpers


def _optional(name: str, purpose: str):
    """Import ptx_passes.<name> lazily: the toolkit's parts land independently."""
    import importlib
    try:
        return importlib.import_module(f"{__package__}.{name}")
    except ImportError as exc:
        raise CliError(f"ptx_passes.{name} is not available ({exc}); it is needed for {purpose}") from None


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror or exc}") from None


def _decode(data: bytes, path: Path) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CliError(f"{path} is neither PTX text (not UTF-8 at byte {exc.start}) "
                       "nor a cubin/fatbin/ELF") from None


def _read_text(path: Path) -> str:
    return _decode(_read_bytes(path), path)


def _write_text(path: Path | None, text: str) -> None:
    if path is None or str(path) == "-":
        sys.stdout.write(text)
        return
    try:
        path.write_text(text)
    except OSError as exc:
        raise CliError(f"cannot write {path}: {exc.strerror or exc}") from None
