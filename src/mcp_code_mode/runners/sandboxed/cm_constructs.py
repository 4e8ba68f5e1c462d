"""The Python constructs the ``local`` runner's interpreter cannot run right, found before a script runs.

smolagents' interpreter evaluates the syntax tree itself. Some constructs it refuses only when it
reaches them (after the script's earlier lines have had their effects); others it runs wrong: it
ignores a ``for``/``while`` loop's ``else`` and a class's ``metaclass=``. ``unsupported`` finds every
such construct in the tree, so the worker refuses the script before anything runs, and the host's
validator reports the same findings. What ``cm_semantics`` makes work (decorators, ``super()``,
argument binding, class bodies, starred displays, f-string conversions) is not listed here.

Pure standard library (``ast``): imported by the worker inside the sandbox and by the host package.
"""

from __future__ import annotations

import ast

ADVICE = 'use runner="cpython" for this script'
"""What every refusal suggests."""

_NODES: dict[type[ast.AST], str] = {
    ast.Match: "a `match` statement",
    ast.NamedExpr: "an assignment expression (`:=`)",
    ast.Nonlocal: "a `nonlocal` statement",
    ast.Global: "a `global` statement",
    ast.Yield: "`yield` (a generator function)",
    ast.YieldFrom: "`yield from` (a generator function)",
    ast.AsyncFunctionDef: "`async def`",
    ast.Await: "`await`",
    ast.AsyncFor: "`async for`",
    ast.AsyncWith: "`async with`",
}
if hasattr(ast, "TryStar"):
    _NODES[ast.TryStar] = "`except*`"
if hasattr(ast, "TypeAlias"):  # Python 3.12
    _NODES[getattr(ast, "TypeAlias")] = "a `type` alias statement"  # noqa: B009

_CLASS_BODY = (ast.FunctionDef, ast.AnnAssign, ast.Assign, ast.Pass)
"""The statements the interpreter evaluates in a class body (besides a docstring)."""


def unsupported(code: str) -> list[tuple[int, str]]:
    """Every construct of ``code`` the local runner would refuse or run wrong: (line, message naming it),
    in line order. A script that does not parse has none (its ``SyntaxError`` is reported instead)."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return []
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        what = _construct(node)
        if what is not None:
            found.append((getattr(node, "lineno", 1), f"{what} is not supported by the local runner"))
        if isinstance(node, ast.ClassDef):
            found += _class_body(node)
    return sorted(set(found))


def _construct(node: ast.AST) -> str | None:
    name = _NODES.get(type(node))
    if name is not None:
        return name
    if isinstance(node, ast.For | ast.While) and node.orelse:
        return f"an `else` clause on a `{'for' if isinstance(node, ast.For) else 'while'}` loop"
    if isinstance(node, ast.With) and any(
        item.optional_vars is not None and not isinstance(item.optional_vars, ast.Name) for item in node.items
    ):
        return "`with ... as` a target that is not a plain name"
    if isinstance(node, ast.Raise) and node.exc is None:
        return "a bare `raise` (re-raise: write `raise e` with `except ... as e`)"
    if isinstance(node, ast.Delete) and any(not isinstance(t, ast.Name | ast.Subscript) for t in node.targets):
        return "`del` of an attribute"
    if isinstance(node, ast.ClassDef) and node.keywords:
        return "a class keyword argument (`metaclass=` ...)"
    return None


def _class_body(node: ast.ClassDef) -> list[tuple[int, str]]:
    """The class-body statements the interpreter does not evaluate (it runs assignments, annotations,
    methods, ``pass`` and a docstring)."""
    found: list[tuple[int, str]] = []
    for index, statement in enumerate(node.body):
        docstring = index == 0 and isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)
        if not isinstance(statement, _CLASS_BODY) and not docstring and type(statement) not in _NODES:
            kind = type(statement).__name__
            found.append(
                (statement.lineno, f"a `{kind}` statement in a class body is not supported by the local runner")
            )
    return found


def refusal(code: str, findings: list[tuple[int, str]]) -> dict[str, object]:
    """The run's error for ``findings``: type ``UnsupportedSyntax``, the first finding's line, every finding."""
    lines = code.splitlines()
    line = findings[0][0]
    listed = "; ".join(f"line {n}: {message}" for n, message in findings)
    source = lines[line - 1].strip() if 0 < line <= len(lines) else ""
    return {
        "type": "UnsupportedSyntax",
        "message": f"{listed} ({ADVICE})",
        "line": line,
        "traceback": f"line {line}: {source}" if source else None,
    }
