"""The hand-written stubs ``python/kquota/_core.pyi`` match the compiled binding.

mypy, the documentation and users' editors read the stubs, never the binding, so a stub
that drifts from ``kquota._core`` is wrong without any other test noticing. This test
parses the stubs with ``ast`` and checks them against the module as built:

* every public name the module exports has a stub, and every stub names something the
  module has (the stubs' private type aliases excepted), and the two ``__all__`` agree;
* for each class, its public methods, properties and attributes, both ways, and each one
  a method on both sides or an attribute on both sides;
* for each function, method and constructor whose binding gives a
  ``__text_signature__``, the parameters: names, order, kinds (positional, ``*args``,
  keyword-only, ``**kwargs``) and which have defaults.
"""

from __future__ import annotations

import ast
import inspect
from typing import Any, NamedTuple

import paths
from kquota import _core as kquota_core

STUBS = paths.ROOT / "python" / "kquota" / "_core.pyi"


class Param(NamedTuple):
    """One parameter as both sides can tell it."""

    name: str
    kind: str
    has_default: bool


class Stub(NamedTuple):
    """A stubbed name: a function or method (its parameters; ``None`` when overloaded), a
    class (its members), or an attribute."""

    kind: str  # "function", "class" or "attribute"
    params: list[Param] | None = None
    members: dict[str, Stub] | None = None


def _is_property(node: ast.FunctionDef) -> bool:
    return any(
        (isinstance(d, ast.Name) and d.id == "property")
        or (isinstance(d, ast.Attribute) and d.attr in ("setter", "getter", "deleter"))
        for d in node.decorator_list
    )


def _is_overload(node: ast.FunctionDef) -> bool:
    return any(isinstance(d, ast.Name) and d.id == "overload" for d in node.decorator_list)


def _stub_params(node: ast.FunctionDef) -> list[Param]:
    args = node.args
    positional = args.posonlyargs + args.args
    # Defaults belong to the last positional parameters.
    first_default = len(positional) - len(args.defaults)
    params = [
        Param(
            a.arg,
            "positional-only" if a in args.posonlyargs else "positional",
            i >= first_default,
        )
        for i, a in enumerate(positional)
    ]
    if args.vararg:
        params.append(Param(args.vararg.arg, "*args", False))
    params += [
        Param(a.arg, "keyword-only", d is not None)
        for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True)
    ]
    if args.kwarg:
        params.append(Param(args.kwarg.arg, "**kwargs", False))
    return params


def _stub_body(body: list[ast.stmt]) -> dict[str, Stub]:
    """The names a module or class body stubs (imports and type aliases are not names of
    the binding: a private assignment with a value is an alias)."""
    names: dict[str, Stub] = {}
    for node in body:
        if isinstance(node, ast.FunctionDef):
            if _is_property(node):
                names[node.name] = Stub("attribute")
            elif node.name in names and names[node.name].kind == "function":
                names[node.name] = Stub("function")  # overloaded: no one signature
            else:
                params = None if _is_overload(node) else _stub_params(node)
                names[node.name] = Stub("function", params)
        elif isinstance(node, ast.ClassDef):
            names[node.name] = Stub("class", members=_stub_body(node.body))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = Stub("attribute")
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name) and not target.id.startswith("_"):
                    names[target.id] = Stub("attribute")
    return names


def _stub_all(tree: ast.Module) -> list[str]:
    for node in tree.body:
        if isinstance(node, ast.Assign) and [
            t.id for t in node.targets if isinstance(t, ast.Name)
        ] == ["__all__"]:
            return list(ast.literal_eval(node.value))
    raise AssertionError(f"{STUBS.name} has no __all__")


def _tree() -> ast.Module:
    return ast.parse(STUBS.read_text(encoding="utf-8"), filename=str(STUBS))


def _runtime_params(obj: Any) -> list[Param] | None:
    """The parameters the binding's ``__text_signature__`` gives, or ``None`` without one."""
    if getattr(obj, "__text_signature__", None) is None:
        return None
    kinds = {
        inspect.Parameter.POSITIONAL_ONLY: "positional-only",
        inspect.Parameter.POSITIONAL_OR_KEYWORD: "positional",
        inspect.Parameter.VAR_POSITIONAL: "*args",
        inspect.Parameter.KEYWORD_ONLY: "keyword-only",
        inspect.Parameter.VAR_KEYWORD: "**kwargs",
    }
    return [
        Param(p.name, kinds[p.kind], p.default is not p.empty)
        for p in inspect.signature(obj).parameters.values()
    ]


def _comparable(params: list[Param], *, method: bool) -> list[Param]:
    """Parameters as they are compared: a method's ``self`` or ``cls`` is dropped (the
    stubs write it positional-or-keyword, the binding positional-only), and positional-only
    counts as positional, as pyo3 makes no parameter positional-only."""
    if method and params and params[0].name in ("self", "cls"):
        params = params[1:]
    return [p._replace(kind="positional") if p.kind == "positional-only" else p for p in params]


def _member_kind(cls: type, name: str) -> str:
    """Whether a class's member is called ("function": methods, static and class methods)
    or read ("attribute": getters and class attributes)."""
    value = inspect.getattr_static(cls, name)
    if isinstance(value, (staticmethod, classmethod)) or inspect.isroutine(value):
        return "function"
    return "attribute"


def _public(names: Any) -> set[str]:
    return {n for n in names if not n.startswith("_")}


def signature_drift(name: str, stub: Stub, runtime: Any, *, method: bool) -> list[str]:
    if stub.params is None:
        return []
    runtime_params = _runtime_params(runtime)
    if runtime_params is None:
        return []
    stubbed = _comparable(stub.params, method=method)
    found = _comparable(runtime_params, method=method)
    if stubbed == found:
        return []

    def show(params: list[Param]) -> str:
        return ", ".join(f"{p.name}{'=' if p.has_default else ''} [{p.kind}]" for p in params)

    return [f"{name}: stub ({show(stubbed)}) but binding ({show(found)})"]


def drift() -> list[str]:
    """Every way the stubs and the binding differ, one line each."""
    tree = _tree()
    stubs = _stub_body(tree.body)
    problems: list[str] = []

    exported = set(kquota_core.__all__)
    public = _public(dir(kquota_core)) | {n for n in exported if n.startswith("__")}
    stub_all = _stub_all(tree)
    if sorted(stub_all) != sorted(exported):
        problems.append(
            f"__all__: stub only {sorted(set(stub_all) - exported)}, "
            f"binding only {sorted(exported - set(stub_all))}"
        )
    for name in sorted(public - stubs.keys()):
        problems.append(f"{name}: in the module, no stub")
    for name in sorted(stubs.keys() - {"__all__"}):
        if not hasattr(kquota_core, name):
            problems.append(f"{name}: stubbed, not in the module")

    for name, stub in sorted(stubs.items()):
        if name == "__all__" or not hasattr(kquota_core, name):
            continue
        runtime = getattr(kquota_core, name)
        if stub.kind == "function":
            problems += signature_drift(name, stub, runtime, method=False)
        elif stub.kind == "class":
            problems += class_drift(name, stub, runtime)
    return problems


def class_drift(name: str, stub: Stub, cls: type) -> list[str]:
    assert stub.members is not None
    problems: list[str] = []
    if not inspect.isclass(cls):
        return [f"{name}: stubbed as a class, but the module's is {type(cls).__name__}"]
    members = stub.members
    # What the class itself defines (what it inherits is stubbed on its base).
    own = _public(vars(cls))
    for member in sorted(own - members.keys()):
        problems.append(f"{name}.{member}: in the binding, no stub")
    for member in sorted(_public(members) - set(dir(cls))):
        problems.append(f"{name}.{member}: stubbed, not in the binding")
    for member in sorted(_public(members) & set(dir(cls))):
        stubbed, found = members[member].kind, _member_kind(cls, member)
        if stubbed != found:
            problems.append(f"{name}.{member}: stubbed as {stubbed}, binding has {found}")
        elif found == "function":
            raw = inspect.getattr_static(cls, member)
            static = isinstance(raw, staticmethod)
            runtime = raw.__func__ if isinstance(raw, (staticmethod, classmethod)) else raw
            problems += signature_drift(
                f"{name}.{member}", members[member], runtime, method=not static
            )
    # The constructor: pyo3 puts the signature of ``#[new]`` on the class.
    constructor = members.get("__init__") or members.get("__new__")
    if getattr(cls, "__text_signature__", None) is not None:
        if constructor is None:
            problems.append(f"{name}: the binding takes arguments, the stub no constructor")
        else:
            problems += signature_drift(name, constructor, cls, method=True)
    return problems


def test_the_stubs_match_the_binding() -> None:
    problems = drift()
    assert not problems, f"{STUBS.name} and kquota._core differ:\n" + "\n".join(problems)
