"""Corridors between the server's parts: a function that takes a job or a part of the
server takes it through a declared, narrow type, and uses nothing else of it.

tests/test_import_layers.py keeps imports one-way. Calls can still go both ways
through a parameter: a handler handed the whole session could call the server
through it without importing anything. So, in tally/server/:

1. every parameter named `session`, `server` or `job` is annotated;
2. its annotation is a class whose module does not depend on the function's module
   (directly or through other modules): otherwise the two call each other;
3. the function uses only members that class declares (its own or its bases'
   within tally): `param.member`, and `self.attr.member` where the class stored the
   parameter as `self.attr` in __init__;
4. every request handler takes the job as `job: Job` (tally/server/job.py).
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from test_import_layers import ROOT, import_graph, module_files

SCOPE = "tally.server"
NARROWED = {"session", "server", "job"}


@dataclass(frozen=True)
class ClassRef:
    module: str
    name: str


def _trees() -> dict[str, ast.Module]:
    return {name: ast.parse(path.read_text(), str(path)) for name, path in module_files().items()}


TREES = _trees()
GRAPH = import_graph()
MODULES = set(module_files())


def _imported_names(module: str) -> dict[str, str]:
    """Names a module binds by import: name -> the module (for `import x` / `from p import mod`)
    or 'module:Name' (for `from m import Name`)."""
    names: dict[str, str] = {}
    is_package = module_files()[module].name == "__init__.py"
    for node in ast.walk(TREES[module]):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                anchor = anchor if is_package else anchor[:-1]
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                full = f"{base}.{alias.name}"
                names[alias.asname or alias.name] = full if full in MODULES else f"{base}:{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                names[alias.asname or alias.name.split(".")[0]] = alias.name
    return names


def resolve(module: str, annotation: ast.expr) -> ClassRef | None:
    """The class of ours an annotation names (X, X | None, pkg.X), or None (not ours)."""
    if isinstance(annotation, ast.BinOp):              # X | None
        return resolve(module, annotation.left) or resolve(module, annotation.right)
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        return resolve(module, ast.parse(annotation.value, mode="eval").body)
    imported = _imported_names(module)
    if isinstance(annotation, ast.Name):
        if any(isinstance(n, ast.ClassDef) and n.name == annotation.id for n in TREES[module].body):
            return ClassRef(module, annotation.id)
        target = imported.get(annotation.id, "")
        if ":" in target and target.split(":")[0] in MODULES:
            return ClassRef(*target.split(":"))
        return None
    if isinstance(annotation, ast.Attribute) and isinstance(annotation.value, ast.Name):
        target = imported.get(annotation.value.id)
        if target in MODULES:
            return ClassRef(target, annotation.attr)
    return None


def _class_def(ref: ClassRef) -> ast.ClassDef:
    for node in TREES[ref.module].body:
        if isinstance(node, ast.ClassDef) and node.name == ref.name:
            return node
    raise AssertionError(f"{ref.module} defines no class {ref.name}")


def members(ref: ClassRef) -> set[str]:
    """What a class of ours declares: annotated and assigned names, methods,
    properties, and what its bases of ours declare."""
    found: set[str] = set()
    cls = _class_def(ref)
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            found.add(node.target.id)
        elif isinstance(node, ast.Assign):
            found |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found.add(node.name)
            if node.name == "__init__":      # a concrete class: what __init__ assigns to self
                found |= {t.attr for n in ast.walk(node) if isinstance(n, (ast.Assign, ast.AnnAssign))
                          for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
                          if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"}
    for base in cls.bases:
        base_ref = resolve(ref.module, base)
        if base_ref is not None:
            found |= members(base_ref)
    return found


def depends_on(module: str, target: str) -> bool:
    """Whether `module` imports `target`, directly or through other modules."""
    seen, todo = set(), [module]
    while todo:
        here = todo.pop()
        if here == target:
            return True
        if here not in seen:
            seen.add(here)
            todo.extend(GRAPH.get(here, ()))
    return False


@dataclass
class Narrowed:
    module: str
    function: str
    parameter: str
    line: int
    ref: ClassRef | None
    annotated: bool
    uses: set[str]


def narrowed_parameters() -> list[Narrowed]:
    out = []
    for module, tree in TREES.items():
        if not module.startswith(SCOPE):
            continue
        classes = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
        stored: dict[int, dict[str, tuple[str, ast.expr | None]]] = {}   # class -> self.attr -> (param, annotation)
        for cls in classes:
            for node in cls.body:
                if isinstance(node, ast.FunctionDef) and node.name == "__init__":
                    params = {a.arg: a.annotation for a in node.args.args if a.arg in NARROWED}
                    for n in ast.walk(node):
                        if isinstance(n, ast.Assign):
                            pairs = zip(n.targets[0].elts, n.value.elts) if isinstance(n.targets[0], ast.Tuple) \
                                and isinstance(n.value, ast.Tuple) else [(n.targets[0], n.value)]
                            for target, value in pairs:
                                if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) \
                                        and target.value.id == "self" and isinstance(value, ast.Name) \
                                        and value.id in params:
                                    stored.setdefault(id(cls), {})[target.attr] = (value.id, params[value.id])
        for cls in classes:
            for attr, (param, annotation) in stored.get(id(cls), {}).items():
                uses = {n.attr for n in ast.walk(cls) if isinstance(n, ast.Attribute)
                        and isinstance(n.value, ast.Attribute) and n.value.attr == attr
                        and isinstance(n.value.value, ast.Name) and n.value.value.id == "self"}
                ref = resolve(module, annotation) if annotation is not None else None
                out.append(Narrowed(module, f"{cls.name}.self.{attr}", param, cls.lineno, ref,
                                    annotation is not None, uses))
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            args = node.args
            for arg in (*args.posonlyargs, *args.args, *args.kwonlyargs):
                if arg.arg not in NARROWED:
                    continue
                uses = {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)
                        and isinstance(n.value, ast.Name) and n.value.id == arg.arg}
                ref = resolve(module, arg.annotation) if arg.annotation is not None else None
                out.append(Narrowed(module, node.name, arg.arg, node.lineno, ref, arg.annotation is not None, uses))
    return out


PARAMETERS = narrowed_parameters()


def where(p: Narrowed) -> str:
    return f"{p.module}:{p.line} {p.function}({p.parameter})"


def test_the_check_finds_what_it_checks():
    """It sees the handlers, the subsystems and a stored parameter, with their uses."""
    found = {(p.module, p.function, p.parameter): p for p in PARAMETERS}
    alloc = found[("tally.server.handlers.memory", "mem_alloc", "job")]
    assert alloc.ref == ClassRef("tally.server.job", "Job")
    suspend = found[("tally.server.suspend", "suspend", "server")]
    assert suspend.ref == ClassRef("tally.server.suspend", "SuspendHost") and "executor" in suspend.uses
    drain = found[("tally.server.drain", "Drain.self.server", "server")]
    assert drain.ref == ClassRef("tally.server.drain", "DrainHost") and "attached_sessions" in drain.uses
    assert {"executor", "attached_sessions", "counters"} <= members(drain.ref)   # its own and its bases'


def test_every_job_and_server_parameter_is_annotated():
    bare = [where(p) for p in PARAMETERS if not p.annotated]
    assert bare == [], "annotate these with the narrow type they use: " + "; ".join(bare)


def test_no_call_goes_both_ways_through_an_annotation():
    both = [f"{where(p)}: {p.ref.module}.{p.ref.name}" for p in PARAMETERS
            if p.ref is not None and p.ref.module != p.module and depends_on(p.ref.module, p.module)]
    assert both == [], ("these parameters' types come from modules that depend on the function's own, so calls "
                        "go both ways through them; describe what is used by a Protocol in a lower module: "
                        + "; ".join(both))


def test_a_parameter_is_used_only_through_what_its_type_declares():
    undeclared = []
    for p in PARAMETERS:
        if p.ref is None:
            continue
        missing = p.uses - members(p.ref)
        if missing:
            undeclared.append(f"{where(p)} uses {sorted(missing)}, which {p.ref.name} does not declare")
    assert undeclared == [], "; ".join(undeclared)


def test_every_handler_takes_the_job():
    from tally.server.handlers import HANDLERS

    wrong = []
    for _message, fn in HANDLERS.values():
        first = fn.__code__.co_varnames[0]
        annotation = fn.__annotations__.get(first)
        if (first, annotation) != ("job", "Job"):
            wrong.append(f"{fn.__module__}.{fn.__name__}({first}: {annotation})")
    assert wrong == [], "handlers must take `job: Job` first: " + "; ".join(wrong)


def test_the_check_fails_on_a_call_back_up(tmp_path: Path):
    """A handler typed with the session itself (which imports the handlers) is a
    two-way call; one that reaches an undeclared member is caught too."""
    session = ClassRef("tally.server.session", "Session")
    assert depends_on(session.module, "tally.server.handlers.memory")
    job = ClassRef("tally.server.job", "Job")
    assert "server" not in members(job) and "services" in members(job) and "client" in members(job)
    assert (ROOT / "tally" / "server" / "job.py").exists()
