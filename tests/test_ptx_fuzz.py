"""Property tests (hypothesis).

1. Mutated or truncated PTX (byte level and token level) never crashes the parser: it either
   raises PtxParseError with a position, or parses, and then what it parsed prints back to an
   equal IR.
2. Programs generated valid-by-construction as IR print and parse back to an equal IR.
"""
from __future__ import annotations

import string

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ptx_corpus import CORPUS_DIR, HANDWRITTEN_PTX, TRITON_DIR, compile_ptx
from ptx_passes import PtxParseError, ir, parse_module, print_module
from ptx_passes.lexer import tokenize

# Mutation checks are cheap (a parse each); generated programs cost more to draw.
FUZZ = settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _seeds() -> list[str]:
    seeds = [p.read_text() for p in HANDWRITTEN_PTX]
    seeds.append((TRITON_DIR / "vector_add.sm_80.ptx").read_text())
    seeds.append(compile_ptx(CORPUS_DIR / "noinline_call.cu", "sm_80", ("-lineinfo",)))
    seeds.append(compile_ptx(CORPUS_DIR / "warp_shuffle.cu", "sm_90"))
    return seeds


SEEDS = _seeds()


def _tokens(text: str) -> list[str]:
    toks = tokenize(text)
    return toks.texts[:-1]


SEED_TOKENS = [_tokens(s) for s in SEEDS]
VOCABULARY = sorted({t for toks in SEED_TOKENS for t in toks}
                    | set("{}[]();,:@!|+-=<>") | {".reg", ".entry", ".func", ".param", "%r<4>",
                                                   "0f3F800000", "0d3FF0000000000000", "_",
                                                   '"x"', ".loc", ".section", "/*", "*/", "//"})


def _accepts_or_reports(text: str) -> None:
    try:
        module = parse_module(text, "fuzz.ptx")
    except PtxParseError as err:
        assert err.line >= 1 and err.column >= 1 and err.message
        return
    printed = print_module(module)
    assert parse_module(printed, "printed.ptx") == module


def _splice(data: st.DataObject, text: str) -> str:
    for _ in range(data.draw(st.integers(1, 4), label="edits")):
        n = len(text)
        op = data.draw(st.sampled_from(["delete", "duplicate", "swap", "insert"]), label="op")
        a = data.draw(st.integers(0, n), label="at")
        length = data.draw(st.integers(0, 40), label="length")
        b = min(n, a + length)
        if op == "delete":
            text = text[:a] + text[b:]
        elif op == "duplicate":
            text = text[:b] + text[a:b] + text[b:]
        elif op == "swap":
            c = data.draw(st.integers(0, n), label="other")
            d = min(n, c + length)
            if b <= c:
                text = text[:a] + text[c:d] + text[b:c] + text[a:b] + text[d:]
        else:
            junk = data.draw(st.text(alphabet=string.printable + "%$.\u00e9\u2028\x00", max_size=12),
                             label="junk")
            text = text[:a] + junk + text[a:]
    return text


@FUZZ
@given(st.data())
def test_byte_mutations_parse_or_raise(data):
    seed = data.draw(st.sampled_from(SEEDS), label="seed")
    _accepts_or_reports(_splice(data, seed))


@FUZZ
@given(st.data())
def test_token_mutations_parse_or_raise(data):
    tokens = list(data.draw(st.sampled_from(SEED_TOKENS), label="seed"))
    for _ in range(data.draw(st.integers(1, 6), label="edits")):
        op = data.draw(st.sampled_from(["delete", "duplicate", "swap", "insert"]), label="op")
        i = data.draw(st.integers(0, len(tokens) - 1), label="at")
        if op == "delete":
            del tokens[i]
        elif op == "duplicate":
            tokens.insert(i, tokens[i])
        elif op == "swap":
            j = data.draw(st.integers(0, len(tokens) - 1), label="other")
            tokens[i], tokens[j] = tokens[j], tokens[i]
        else:
            tokens.insert(i, data.draw(st.sampled_from(VOCABULARY), label="token"))
    _accepts_or_reports(" ".join(t + "\n" if t in (";", "{", "}") else t for t in tokens))


@FUZZ
@given(st.data())
def test_truncated_ptx_parses_or_raises(data):
    seed = data.draw(st.sampled_from(SEEDS), label="seed")
    cut = data.draw(st.integers(0, len(seed)), label="cut")
    _accepts_or_reports(seed[:cut])


def test_every_token_boundary_truncation_of_a_kernel():
    seed = SEEDS[1]  # Triton vector add
    toks = tokenize(seed)
    for start in toks.starts:
        _accepts_or_reports(seed[:start])


# ------------------------------------------------------------------ generated programs

_TYPES = ["b8", "b16", "b32", "b64", "u8", "u16", "u32", "u64", "s32", "s64", "f16", "f32", "f64"]
_MODIFIERS = ["global", "shared", "local", "const", "param", "v2", "v4", "rn", "rz", "ftz", "sat",
              "approx", "wide", "lo", "hi", "sync", "aligned", "uni", "nc", "gpu", "cta", "relaxed",
              "eq", "lt", "geu", "and", "shared::cta", "L2::128B"] + _TYPES
_OPCODES = sorted(ir.KNOWN_OPCODES)
_SPECIALS = [("%tid", "x"), ("%ctaid", "y"), ("%nctaid", "z"), ("%ntid", "x"), ("%laneid", None),
             ("%clock64", None), ("%envreg7", None), ("%lanemask_ge", None), ("%pm3_64", None)]

int_texts = st.one_of(
    st.integers(0, 2**64 - 1).map(str),
    st.integers(-2**63, -1).map(str),
    st.integers(0, 2**32).map(lambda v: f"0x{v:X}"),
    st.integers(1, 4096).map(lambda v: f"0{v:o}"),
    st.integers(0, 255).map(lambda v: f"0b{v:b}"),
    st.integers(0, 2**32).map(lambda v: f"{v}U"),
)
float_texts = st.one_of(
    st.integers(0, 2**32 - 1).map(lambda v: f"0f{v:08X}"),
    st.integers(0, 2**64 - 1).map(lambda v: f"0d{v:016X}"),
    st.sampled_from(["1.5", "0.25", "3.0", "1e-3", "2.5E+10", "7."]),
)


@st.composite
def modules(draw) -> ir.Module:
    globals_ = [f"g_{i}" for i in range(draw(st.integers(0, 3)))]
    items: list = []
    for name in globals_:
        space = draw(st.sampled_from(["global", "const", "shared"]))
        dims = tuple(draw(st.lists(st.one_of(st.none(), st.integers(1, 64)), max_size=2)))
        if any(d is None for d in dims[1:]):
            dims = tuple(d or 1 for d in dims)
        init = None
        if space != "shared" and draw(st.booleans()):
            leaves = st.builds(ir.Immediate, st.one_of(int_texts, float_texts))
            symbols = st.builds(ir.SymbolAddress, st.sampled_from(globals_), st.integers(-16, 64),
                                st.booleans())
            init = draw(st.recursive(st.one_of(leaves, symbols),
                                     lambda inner: st.builds(ir.InitList, st.lists(inner, min_size=1,
                                                                                   max_size=4).map(tuple)),
                                     max_leaves=8))
        items.append(ir.VarDecl(
            space, draw(st.sampled_from(_TYPES)), name,
            linkage=draw(st.sampled_from([(), ("visible",), ("extern",), ("weak",)])),
            align=draw(st.sampled_from([None, 1, 4, 16])), vector=draw(st.sampled_from([None, 2, 4])),
            array_dims=dims, init=init))
    functions = [f"fn_{i}" for i in range(draw(st.integers(1, 3)))]
    for name in functions:
        items.append(draw(functions_(name, globals_ + functions)))
    if draw(st.booleans()):
        items.append(ir.FileDirective(1, draw(st.text(alphabet=string.ascii_letters + "/._", max_size=20)),
                                      draw(st.sampled_from([(), (",", "17", ",", "4")]))))
    return ir.Module(draw(st.sampled_from(["7.0", "8.5", "9.0"])),
                     draw(st.sampled_from([("sm_80",), ("sm_90a",), ("sm_80", "debug")])),
                     draw(st.sampled_from([None, 64])), items)


@st.composite
def params(draw, name: str) -> ir.Param:
    ptr = draw(st.booleans())
    return ir.Param(name, draw(st.sampled_from(_TYPES)), align=draw(st.sampled_from([None, 4, 8, 16])),
                    vector=draw(st.sampled_from([None, 2, 4])),
                    array_dims=tuple(draw(st.lists(st.integers(1, 32), max_size=2))),
                    ptr=ptr, ptr_space=draw(st.sampled_from([None, "global", "shared"])) if ptr else None,
                    ptr_align=draw(st.sampled_from([None, 4, 16])) if ptr else None)


@st.composite
def functions_(draw, name: str, symbols: list[str]) -> ir.Function:
    kind = draw(st.sampled_from(["entry", "func"]))
    n_params = draw(st.integers(0, 4))
    fn_params = [draw(params(f"{name}_param_{i}")) for i in range(n_params)]
    return_params = None
    if kind == "func" and draw(st.booleans()):
        return_params = [draw(params(f"{name}_ret"))]
    directives = []
    if draw(st.booleans()):
        directives.append(ir.FunctionDirective("maxntid", tuple(draw(st.lists(st.integers(1, 1024),
                                                                                min_size=1, max_size=3)))))
    if draw(st.booleans()):
        directives.append(ir.FunctionDirective("pragma", ('"nounroll"',)))
    if draw(st.booleans()):
        directives.append(ir.FunctionDirective("noreturn"))
    linkage = draw(st.sampled_from([(), ("visible",), ("weak",)]))
    if draw(st.integers(0, 9)) == 0:
        return ir.Function(name, kind, ("extern",), fn_params, return_params, directives, None)
    labels = [f"$L_{name}_{i}" for i in range(draw(st.integers(0, 3)))]
    symbol_names = symbols + [p.name for p in fn_params]
    body = draw(blocks(labels, symbol_names, depth=0, plain_registers=[]))
    for label in labels:  # every label is defined once, somewhere in the body
        at = draw(st.integers(0, len(body.statements)))
        body.statements.insert(at, ir.Label(label))
    return ir.Function(name, kind, linkage, fn_params, return_params, directives, body)


@st.composite
def operands(draw, labels, symbols, registers, depth=0):
    simple = [
        st.sampled_from(registers).map(ir.Register),
        st.builds(ir.Immediate, st.one_of(int_texts, float_texts)),
        st.sampled_from(_SPECIALS).map(lambda s: ir.SpecialReg(*s)),
    ]
    if symbols:
        simple.append(st.sampled_from(symbols).map(ir.Symbol))
    if labels:
        simple.append(st.sampled_from(labels).map(ir.LabelRef))
    bases = [st.sampled_from(registers).map(ir.Register)]
    if symbols:
        bases.append(st.sampled_from(symbols).map(ir.Symbol))
    compound = [
        st.builds(ir.Address, st.one_of(*bases), st.integers(-64, 4096)),
        st.builds(ir.Address, st.none(), st.integers(0, 4096)),
        st.sampled_from(registers).map(lambda r: ir.Negated(ir.Register(r))),
        st.builds(ir.PredPair, st.sampled_from(registers).map(ir.Register),
                  st.one_of(st.sampled_from(registers).map(ir.Register), st.just(ir.Sink()))),
        st.lists(st.one_of(st.sampled_from(registers).map(ir.Register), st.just(ir.Sink())),
                 min_size=1, max_size=4).map(lambda e: ir.Vector(tuple(e))),
    ]
    if depth == 0:
        compound.append(st.lists(operands(labels, symbols, registers, depth=1), max_size=3)
                        .map(lambda e: ir.ParenList(tuple(e))))
    return draw(st.one_of(*simple, *compound))


@st.composite
def blocks(draw, labels, symbols, depth, plain_registers) -> ir.Block:
    statements: list = []
    percent = [f"%r{i}" for i in range(8)] + ["%rd1", "%p1", "%f2"]
    if depth == 0:
        statements += [ir.RegDecl("b32", "%r", 8), ir.RegDecl("b64", "%rd", 2),
                       ir.RegDecl("pred", "%p", 2), ir.RegDecl("f32", "%f", 3)]
    else:
        # Inline-asm style: plain names are registers only inside the block declaring them.
        own = f"t{depth}_{draw(st.integers(0, 99))}"
        statements.append(ir.RegDecl(draw(st.sampled_from(["pred", "b32"])), own))
        plain_registers = plain_registers + [own]
    registers = percent + plain_registers
    for _ in range(draw(st.integers(0, 8))):
        choice = draw(st.integers(0, 9))
        if choice <= 6:
            guard = None
            if draw(st.booleans()):
                guard = ir.Guard(ir.Register(draw(st.sampled_from(registers))), draw(st.booleans()))
            statements.append(ir.Instruction(
                draw(st.sampled_from(_OPCODES)),
                tuple(draw(st.lists(st.sampled_from(_MODIFIERS), max_size=4))),
                tuple(draw(st.lists(operands(labels, symbols, registers), max_size=4))),
                guard))
        elif choice == 7 and depth < 2:
            statements.append(draw(blocks(labels, symbols, depth + 1, plain_registers)))
        elif choice == 8:
            statements.append(draw(st.sampled_from([
                ir.Pragma("nounroll"), ir.Loc(1, 12, 3),
                ir.Loc(1, 2, 31, (",", "function_name", "$L__info_string0", ",", "inlined_at", "1", "3", "41")),
                ir.VarDecl("shared", "b8", f"smem_{depth}", align=16, array_dims=(64,)),
                ir.VarDecl("param", "b32", f"param_{depth}")])))
        else:
            statements.append(ir.RegDecl(draw(st.sampled_from(_TYPES)), f"%x{depth}",
                                         draw(st.sampled_from([None, 3]))))
    return ir.Block(statements)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(modules())
def test_generated_programs_round_trip(module):
    printed = print_module(module)
    assert parse_module(printed, "generated.ptx") == module
    assert print_module(parse_module(printed)) == printed
