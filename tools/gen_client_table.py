#!/usr/bin/env python3
"""Generate the client library's driver entry-point table from the CUDA headers.

One source for every entry point: cudaTypedefs.h (and cudaProfilerTypedefs.h for
cuProfilerStart/Stop) declares each one as
`PFN_<name>_v<ABI version>[_ptsz|_ptds]` with its exact signature. cuda.h,
preprocessed the way NVIDIA builds the driver (__CUDA_API_VERSION_INTERNAL), names
the C symbols libcuda exports; each is matched to its PFN entry by name and
checked by signature. Implemented entries are found in client_preload/src by
their definitions `TALLY_ENTRY(<pfn name>)(...)`; every other entry gets a
generated function that logs its name once and returns CUDA_ERROR_NOT_SUPPORTED.

Outputs (client_preload/src/generated/):
  entry_points.h         prototypes: tally_entry_<pfn> and its traced twin tally_traced_<pfn>
  entry_table.cpp        the table cuGetProcAddress searches, and the traced wrappers
  unsupported_entries.cpp  one logging NOT_SUPPORTED function per unimplemented entry
  exported_symbols.cpp   the C symbols cuda.h exports, each forwarding to its entry
  result_codes.cpp       every CUresult with its name and the driver's text for it (libcudart's, else cuda.h's)
  ../../../docs/unsupported-entry-points.md  each NOT_SUPPORTED entry with its reason
                         (tools/unsupported_reasons.py; an entry without one fails)
  memset_entries.cpp     the 24 64-bit cuMemsetD* entries (8/16/32-bit, 1-D and 2-D, Async,
                         per-thread), each one call to memset_entry (memory/memset_entry.h)
                         with the arguments its typedef's position says

Usage: python tools/gen_client_table.py [--check]
--check exits 1 when the committed files differ from a fresh generation.
Needs a C preprocessor ($CC or cc) and the CUDA headers ($CUDA_HOME/include).
"""
from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from unsupported_reasons import FIRST_64_BIT_VERSION, reason_for  # noqa: E402  (a module beside this script)

ROOT = Path(__file__).resolve().parents[1]
SOURCE_DIR = ROOT / "client_preload" / "src"
OUT_DIR = SOURCE_DIR / "generated"
UNSUPPORTED_DOC = ROOT / "docs" / "unsupported-entry-points.md"
CUDA_INCLUDE = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "include"

PFN_RE = re.compile(r"typedef\s+CUresult\s*\(\s*CUDAAPI\s*\*\s*PFN_(\w+)\s*\)\s*\(([^;]*)\)\s*;")
PFN_NAME_RE = re.compile(r"(cu\w+?)_v(\d+)(?:_(ptsz|ptds))?")
SYMBOL_RE = re.compile(r"(cu\w+?)(?:_v(\d+))?(?:_(ptsz|ptds))?")
# The GL, EGL and VDPAU typedef headers need those libraries' headers; their entry
# points stay unknown to cuGetProcAddress (SYMBOL_NOT_FOUND), as on a driver built
# without them.
TYPEDEF_HEADERS = ("cudaTypedefs.h", "cudaProfilerTypedefs.h")
DECLARATION_HEADERS = ("cuda.h", "cudaProfiler.h")
IMPLEMENTED_RE = re.compile(r"^TALLY_ENTRY\(\s*(\w+)\s*\)", re.MULTILINE)
C_KEYWORDS = {"int", "char", "long", "short", "float", "double", "void", "unsigned", "signed", "const"}


class GenerationError(Exception):
    pass


@dataclass(frozen=True)
class Param:
    text: str   # as written in cudaTypedefs.h, e.g. "CUdeviceptr_v2 *dptr"
    name: str   # "dptr"


@dataclass
class Entry:
    pfn: str                 # cuMemAlloc_v3020
    name: str                # cuMemAlloc (what cuGetProcAddress is asked for)
    version: int             # 3020
    per_thread: bool         # _ptsz / _ptds variant
    params: tuple[Param, ...]
    symbol: str = ""         # exported C name, e.g. cuMemAlloc_v2
    implemented: bool = False
    reason: str = ""         # why it answers NOT_SUPPORTED (tools/unsupported_reasons.py)


def split_params(text: str) -> list[str]:
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch == "," and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
            continue
        depth += ch in "([{"
        depth -= ch in ")]}"
        cur.append(ch)
    tail = "".join(cur).strip()
    if tail:
        parts.append(tail)
    return [] if parts == ["void"] else parts


def param_name(text: str, where: str) -> str:
    m = re.search(r"(\w+)\s*$", text)
    if not m or m.group(1) in C_KEYWORDS or len(text.split()) < 2 and "*" not in text:
        raise GenerationError(f"{where}: parameter '{text}' has no name; cannot forward it")
    return m.group(1)


def preprocess(source: str) -> str:
    cc = os.environ.get("CC", "cc")
    cmd = [cc, "-E", "-P", "-x", "c", "-I", str(CUDA_INCLUDE), "-D__CUDA_API_VERSION_INTERNAL", "-"]
    try:
        out = subprocess.run(cmd, input=source, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        detail = getattr(e, "stderr", "") or str(e)
        raise GenerationError(f"preprocessing the CUDA headers failed ({' '.join(cmd)}): {detail}")
    return " ".join(out.split())


def read_entries() -> dict[str, Entry]:
    text = ""
    for header in TYPEDEF_HEADERS:
        path = CUDA_INCLUDE / header
        if not path.exists():
            raise GenerationError(f"{path} not found: set CUDA_HOME to the CUDA toolkit")
        text += " " + " ".join(path.read_text().split())
    entries: dict[str, Entry] = {}
    for m in PFN_RE.finditer(text):
        pfn, params = m.group(1), m.group(2)
        nm = PFN_NAME_RE.fullmatch(pfn)
        if not nm:
            raise GenerationError(f"PFN_{pfn} does not follow <name>_v<version>[_ptsz|_ptds]")
        plist = tuple(Param(p, param_name(p, f"PFN_{pfn}")) for p in split_params(params))
        entries[pfn] = Entry(pfn, nm.group(1), int(nm.group(2)), nm.group(3) is not None, plist)
    if not entries:
        raise GenerationError(f"no PFN typedefs found in {TYPEDEF_HEADERS}")
    return entries


def read_cuda_version() -> int:
    m = re.search(r"#define\s+CUDA_VERSION\s+(\d+)", (CUDA_INCLUDE / "cuda.h").read_text())
    if not m:
        raise GenerationError("cuda.h defines no CUDA_VERSION")
    return int(m.group(1))


class TypeCanon:
    """Spells a parameter type in its final form by resolving typedef aliases
    (CUdeviceptr -> CUdeviceptr_v2 -> unsigned long long), so a cuda.h declaration
    and a PFN typedef written with different aliases compare equal."""

    def __init__(self, preprocessed: str):
        self.alias: dict[str, str] = {}
        for m in re.finditer(r"\btypedef ([^;{}()]*);", preprocessed):
            words = m.group(1).replace("*", " * ").split()
            if len(words) >= 2:
                self.alias[words[-1]] = " ".join(words[:-1])

    def word(self, w: str, depth: int = 0) -> str:
        if w in self.alias and depth < 32:
            return " ".join(self.word(x, depth + 1) for x in self.alias[w].split())
        return w

    def signature(self, params: list[str]) -> tuple[str, ...]:
        out = []
        for p in params:
            words = p.replace("*", " * ").split()
            if len(words) > 1 and words[-1] not in C_KEYWORDS and words[-1] != "*":
                words = words[:-1]  # drop the parameter name
            out.append(" ".join(" ".join(self.word(w) for w in words).split()))
        return tuple(out)


def read_exported_symbols() -> tuple[dict[str, list[str]], TypeCanon]:
    text = preprocess("".join(f"#include <{h}>\n" for h in DECLARATION_HEADERS))
    symbols: dict[str, list[str]] = {}
    # Declarations only: static inline helpers in cuda.h are not exported.
    for m in re.finditer(r"(static inline )?\bCUresult (cu\w+)\s*\(([^;{]*)\)\s*;", text):
        if not m.group(1):
            symbols[m.group(2)] = split_params(m.group(3))
    return symbols, TypeCanon(text)


def bind_symbols(entries: dict[str, Entry], symbols: dict[str, list[str]], canon: TypeCanon) -> None:
    """Match every exported symbol to its PFN entry. cuX is the first ABI version of
    cuX, cuX_v<N> the N-th (cuMemAlloc_v2 -> cuMemAlloc_v3020); a _ptsz/_ptds symbol
    counts among its variant's versions. When the rank does not name an entry
    with the same signature (cuMemcpyHtoD_v2_ptds: one ptds version only), the
    single unbound entry of that name and variant with the same signature is it."""
    groups: dict[tuple[str, bool], list[Entry]] = collections.defaultdict(list)
    for e in entries.values():
        groups[(e.name, e.per_thread)].append(e)
    for g in groups.values():
        g.sort(key=lambda e: e.version)
    sig = {pfn: canon.signature([p.text for p in e.params]) for pfn, e in entries.items()}
    pending = []
    for symbol, params in sorted(symbols.items()):
        m = SYMBOL_RE.fullmatch(symbol)
        name, rank, per_thread = m.group(1), int(m.group(2) or 1), m.group(3) is not None
        group = groups.get((name, per_thread))
        if not group:
            raise GenerationError(f"cuda.h exports {symbol} but cudaTypedefs.h has no PFN_{name}_v*"
                                  f"{'_pt*' if per_thread else ''}")
        want = canon.signature(params)
        if rank <= len(group) and sig[group[rank - 1].pfn] == want and not group[rank - 1].symbol:
            group[rank - 1].symbol = symbol
        else:
            pending.append((symbol, group, want))
    for symbol, group, want in pending:
        matches = [e for e in group if not e.symbol and sig[e.pfn] == want]
        if len(matches) != 1:
            raise GenerationError(f"cannot match {symbol} to one PFN entry by signature "
                                  f"(candidates: {[e.pfn for e in matches] or 'none'})")
        matches[0].symbol = symbol
    unbound = [e.pfn for e in entries.values() if not e.symbol]
    if unbound:
        raise GenerationError(f"PFN entries with no exported symbol in cuda.h: {unbound}")


# What cuGetErrorString answers. NVIDIA's driver answers short texts ("invalid argument"),
# which cuda.h does not publish; the toolkit's CUDA runtime does: since CUDA 10.1 every
# cudaError_t that the driver also has carries the CUresult's number, and the runtime's
# cudaGetErrorString (a table lookup that needs no GPU) gives the same text the driver
# does (cuda-bindings' test_cuda.py checks two: "no error", "invalid device ordinal";
# tests/test_e2e_gpu.py compares every code with the driver's on a GPU). A CUresult the
# runtime has no text for keeps cuda.h's documentation of it.
CUDART = CUDA_INCLUDE.parent / "lib64" / "libcudart.so"


def runtime_texts() -> dict[int, str]:
    import ctypes
    try:
        runtime = ctypes.CDLL(str(CUDART))
    except OSError as e:
        raise GenerationError(f"cannot load {CUDART} for the driver's error texts: {e}") from None
    runtime.cudaGetErrorString.restype = ctypes.c_char_p
    unknown = runtime.cudaGetErrorString(-1)            # the runtime's text for a code it lacks
    texts = {}
    for value in range(1000):
        text = runtime.cudaGetErrorString(value)
        if text and text != unknown:
            texts[value] = text.decode()
    return texts


def read_result_codes() -> list[tuple[int, str, str, str]]:
    """(value, name, text, description) for each CUresult: the text the driver answers
    (the runtime's for the same number or, where the runtime has none, the doc comment),
    and the doc comment cuda.h puts above the value (what tally's own messages and the
    fault-code check read)."""
    text = (CUDA_INCLUDE / "cuda.h").read_text()
    m = re.search(r"typedef enum cudaError_enum \{(.*?)\} CUresult;", text, re.S)
    if not m:
        raise GenerationError("cuda.h has no `typedef enum cudaError_enum {...} CUresult;`")
    driver_texts = runtime_texts()
    codes = []
    for doc, name, value in re.findall(r"/\*\*(.*?)\*/\s*(CUDA_\w+)\s*=\s*(\d+)", m.group(1), re.S):
        description = " ".join(doc.replace("*", " ").split()).replace("::", "")
        codes.append((int(value), name, driver_texts.get(int(value), description), description))
    if len({c[0] for c in codes}) != len(codes) or len(codes) < 50:
        raise GenerationError(f"unexpected CUresult list in cuda.h ({len(codes)} documented values)")
    if driver_texts.get(0) != "no error":
        raise GenerationError(f"{CUDART} says {driver_texts.get(0)!r} for success, not 'no error'")
    return sorted(codes)


def c_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def gen_result_codes(codes: list[tuple[int, str, str, str]]) -> str:
    lines = [
        HEADER_NOTE.format(src="cuda.h"),
        '#include "logging/result_codes.h"',
        "",
        "namespace tally::client {",
        "",
        "// Sorted by value.",
        "const ResultCode kResultCodes[] = {",
    ]
    for value, name, text, description in codes:
        lines.append(f"    {{{value}, {c_string(name)}, {c_string(text)}, {c_string(description)}}},")
    lines += ["};", f"const int kResultCodeCount = {len(codes)};", "", "}  // namespace tally::client", ""]
    return "\n".join(lines)


# The memset family is regular: 8/16/32-bit element sizes, 1-D (dst, value, N) and
# 2-D (dst, pitch, value, width, height), each synchronous or Async (a trailing
# stream), each legacy or per-thread. The entries are generated from their typedefs
# so their signatures cannot drift from the driver's.
MEMSET_RE = re.compile(r"cuMemsetD(?P<two_d>2D)?(?P<bits>8|16|32)(?P<async_>Async)?")


# The _v2000 forms take 32-bit device pointers (CUdeviceptr_v1) and stay unsupported,
# like every other entry of the 32-bit API (FIRST_64_BIT_VERSION).


def memset_form(e: Entry) -> re.Match | None:
    return MEMSET_RE.fullmatch(e.name) if e.version >= FIRST_64_BIT_VERSION else None


def mark_generated(entries: dict[str, Entry]) -> None:
    for e in entries.values():
        if memset_form(e):
            e.implemented = True


def memset_call(e: Entry) -> str:
    form = memset_form(e)
    names = [p.name for p in e.params]
    two_d = bool(form["two_d"])
    async_ = bool(form["async_"])
    want = 5 if two_d else 3
    if len(names) != want + async_:
        raise GenerationError(f"{e.pfn}: expected {want + async_} parameters for a memset entry, "
                              f"cudaTypedefs.h has {len(names)}")
    if two_d:
        dst, pitch, value, width, height = names[:5]
    else:
        (dst, value, width), pitch, height = names[:3], "0", "1"
    stream = names[-1] if async_ else "nullptr"
    size = int(form["bits"]) // 8
    return (f"tally::client::memset_entry({dst}, {pitch}, {value}, {size}, {width}, {height}, {stream}, "
            f"{str(e.per_thread).lower()}, {str(async_).lower()})")


def gen_memset_entries(entries: list[Entry]) -> str:
    lines = [
        HEADER_NOTE.format(src=SOURCES),
        "// cuMemsetD8/D16/D32, their 2-D forms, and the Async and per-thread forms of each:",
        "// each is one call to memset_entry, which sends one Memset request.",
        '#include "entry_points/entry_point.h"',
        '#include "memory/memset_entry.h"',
        "",
    ]
    for e in entries:
        if memset_form(e):
            lines.append(f"TALLY_ENTRY({e.pfn})({params_decl(e)}) {{")
            lines.append(f"  return {memset_call(e)};")
            lines.append("}")
    lines.append("")
    return "\n".join(lines)


def decide_reasons(entries: dict[str, Entry]) -> None:
    """Every unimplemented entry gets its reason; one without fails the generation."""
    newest: dict[str, int] = {}
    for e in entries.values():
        if e.implemented:
            newest[e.name] = max(newest.get(e.name, 0), e.version)
    undecided = []
    for e in entries.values():
        if not e.implemented:
            e.reason = reason_for(e.name, e.version, newest.get(e.name)) or ""
            if not e.reason:
                undecided.append(e.pfn)
    if undecided:
        raise GenerationError(f"no reason why {', '.join(undecided)} answer NOT_SUPPORTED: implement them or add "
                              f"a rule to tools/unsupported_reasons.py")


def gen_unsupported_doc(entries: list[Entry]) -> str:
    by_reason: dict[str, list[str]] = collections.defaultdict(list)
    for e in entries:
        if not e.implemented:
            by_reason[e.reason].append(e.symbol)
    lines = [
        "<!-- GENERATED by tools/gen_client_table.py from tools/unsupported_reasons.py. Do not edit. -->",
        "# Driver entry points tally answers with CUDA_ERROR_NOT_SUPPORTED, and why",
        "",
        f"{sum(len(v) for v in by_reason.values())} of the {len(entries)} entry points of the CUDA "
        "headers tally was built with; a job calling one gets CUDA_ERROR_NOT_SUPPORTED and one log line "
        "with the reason below. An entry point the headers do not name (newer than them) is "
        "CUDA_ERROR_NOT_FOUND from cuGetProcAddress.",
        "",
        "| reason | entry points |",
        "|---|---|",
    ]
    for reason, symbols in sorted(by_reason.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        lines.append(f"| {reason} | {', '.join(f'`{s}`' for s in sorted(symbols))} |")
    lines.append("")
    return "\n".join(lines)


def read_implemented(entries: dict[str, Entry]) -> None:
    seen: dict[str, Path] = {}
    for path in sorted(SOURCE_DIR.rglob("*.cpp")):
        if OUT_DIR in path.parents:
            continue
        for m in IMPLEMENTED_RE.finditer(path.read_text()):
            pfn = m.group(1)
            rel = path.relative_to(ROOT)
            if pfn not in entries:
                raise GenerationError(f"{rel}: TALLY_ENTRY({pfn}) names no entry of cudaTypedefs.h "
                                      f"(expected <name>_v<version>[_ptsz|_ptds], e.g. cuMemAlloc_v3020)")
            if memset_form(entries[pfn]):
                raise GenerationError(f"{rel}: TALLY_ENTRY({pfn}) is a memset entry, which this generator writes "
                                      f"(generated/memset_entries.cpp); change memset_entry instead")
            if pfn in seen:
                raise GenerationError(f"TALLY_ENTRY({pfn}) is defined twice: {seen[pfn]} and {rel}")
            seen[pfn] = rel
            entries[pfn].implemented = True


SOURCES = ", ".join(TYPEDEF_HEADERS + DECLARATION_HEADERS)
HEADER_NOTE = "// GENERATED by tools/gen_client_table.py from {src}. Do not edit."


def params_decl(e: Entry) -> str:
    return ", ".join(p.text for p in e.params) or "void"


def args(e: Entry) -> str:
    return ", ".join(p.name for p in e.params)


def gen_entry_points(entries: list[Entry], cuda_version: int) -> str:
    lines = [
        HEADER_NOTE.format(src=SOURCES),
        "// Every driver entry point, named after its cudaTypedefs.h typedef without PFN_.",
        "// Implement one with TALLY_ENTRY(<name>)(<exact parameters>) { ... } (entry_points/entry_point.h);",
        "// the generator then drops its NOT_SUPPORTED stand-in.",
        "#pragma once",
        '#include "driver_headers.h"',
        "",
        f"static_assert(CUDA_VERSION == {cuda_version}, \"the entry table was generated from CUDA {cuda_version}"
        " headers; run tools/gen_client_table.py against the toolkit you build with\");",
        "",
        "namespace tally::client {",
        f"constexpr int kEntryTableCudaVersion = {cuda_version};",
        f"constexpr int kEntryCount = {len(entries)};",
        "}  // namespace tally::client",
        "",
        'extern "C" {',
    ]
    for e in entries:
        lines.append(f"CUresult tally_entry_{e.pfn}({params_decl(e)});")
    lines.append("")
    for e in entries:
        lines.append(f"CUresult tally_traced_{e.pfn}({params_decl(e)});")
    lines += ['}  // extern "C"', ""]
    return "\n".join(lines)


def gen_entry_table(entries: list[Entry]) -> str:
    rows = sorted(entries, key=lambda e: (e.name, e.per_thread, e.version))
    lines = [
        HEADER_NOTE.format(src=SOURCES),
        '#include "entry_points/entry_table.h"',
        '#include "generated/entry_points.h"',
        '#include "logging/trace.h"',
        "",
        "// Traced twins: cuGetProcAddress hands these out while TALLY_CLIENT_TRACE is set.",
        'extern "C" {',
    ]
    for e in entries:
        call = f"tally_entry_{e.pfn}({args(e)})"
        lines.append(f"CUresult tally_traced_{e.pfn}({params_decl(e)}) {{")
        lines.append(f"  return tally::client::trace_result(\"{e.symbol}\", {call});")
        lines.append("}")
    lines += ['}  // extern "C"', "", "namespace tally::client {", "",
              "// Sorted by (name, per_thread_stream, version) for lookup_entry's binary search.",
              "const EntryPoint kEntryPoints[] = {"]
    for e in rows:
        lines.append(f"    {{\"{e.name}\", {e.version}, {str(e.per_thread).lower()}, "
                     f"{str(e.implemented).lower()}, \"{e.symbol}\", "
                     f"reinterpret_cast<void*>(&tally_entry_{e.pfn}), "
                     f"reinterpret_cast<void*>(&tally_traced_{e.pfn})}},")
    lines += [
        "};",
        "static_assert(sizeof(kEntryPoints) / sizeof(kEntryPoints[0]) == kEntryCount);",
        "",
        "}  // namespace tally::client",
        "",
    ]
    return "\n".join(lines)


def gen_unsupported(entries: list[Entry]) -> str:
    lines = [
        HEADER_NOTE.format(src=SOURCES),
        "// Entry points tally does not implement: each logs its name once and returns",
        "// CUDA_ERROR_NOT_SUPPORTED, so a job sees a clean error instead of a crash.",
        '#include "generated/entry_points.h"',
        '#include "entry_points/unsupported.h"',
        "",
        'extern "C" {',
    ]
    for e in entries:
        if e.implemented:
            continue
        lines.append(f"CUresult tally_entry_{e.pfn}({params_decl(e)}) {{")
        lines.append("  static tally::client::OnceFlag logged;")
        lines.append(f"  return tally::client::unsupported_entry(logged, \"{e.symbol}\", {c_string(e.reason)});")
        lines.append("}")
    lines += ['}  // extern "C"', ""]
    return "\n".join(lines)


def gen_exports(entries: list[Entry]) -> str:
    lines = [
        HEADER_NOTE.format(src=SOURCES),
        "// The C symbols libcuda exports, for programs that link -lcuda or dlsym by name.",
        "// driver_headers.h declares each one as cuda.h does, so a signature that differs",
        "// from the PFN typedef it forwards to fails to compile here.",
        '#include "generated/entry_points.h"',
        '#include "logging/trace.h"',
        "",
        "#pragma GCC visibility push(default)",
        'extern "C" {',
    ]
    for e in sorted(entries, key=lambda e: e.symbol):
        a = args(e)
        lines.append(f"CUresult {e.symbol}({params_decl(e)}) {{")
        lines.append(f"  return tally::client::trace_calls() ? tally_traced_{e.pfn}({a}) : tally_entry_{e.pfn}({a});")
        lines.append("}")
    lines += ['}  // extern "C"', "#pragma GCC visibility pop", ""]
    return "\n".join(lines)


def generate() -> dict[Path, str]:
    entries = read_entries()
    symbols, canon = read_exported_symbols()
    bind_symbols(entries, symbols, canon)
    read_implemented(entries)
    mark_generated(entries)
    decide_reasons(entries)
    ordered = list(entries.values())  # header order
    cuda_version = read_cuda_version()
    return {
        OUT_DIR / "entry_points.h": gen_entry_points(ordered, cuda_version),
        OUT_DIR / "entry_table.cpp": gen_entry_table(ordered),
        OUT_DIR / "unsupported_entries.cpp": gen_unsupported(ordered),
        OUT_DIR / "exported_symbols.cpp": gen_exports(ordered),
        OUT_DIR / "result_codes.cpp": gen_result_codes(read_result_codes()),
        OUT_DIR / "memset_entries.cpp": gen_memset_entries(ordered),
        UNSUPPORTED_DOC: gen_unsupported_doc(ordered),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="fail if the committed files are stale")
    a = ap.parse_args()
    try:
        files = generate()
    except GenerationError as e:
        print(f"gen_client_table: {e}", file=sys.stderr)
        return 2
    if a.check:
        stale = [p for p, text in files.items() if not p.exists() or p.read_text() != text]
        if stale:
            names = ", ".join(str(p.relative_to(ROOT)) for p in stale)
            print(f"stale generated files: {names}; run python tools/gen_client_table.py", file=sys.stderr)
            return 1
        return 0
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    for path, text in files.items():
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
