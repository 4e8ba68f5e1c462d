"""The two Python runners inside the sandbox: smolagents' AST interpreter (``local``) and plain CPython.

Part of the program that runs inside the sandbox (see ``worker.py``): standard library only, plus
smolagents' interpreter for ``local``.

Under ``cpython`` a stub call (and ``call_tool``) is awaitable by the rule the pyodide runner follows
(``cm_runtime.AwaitableCalls``): inside ``async def`` (its comprehensions included) and, in top-level
code, when the call is written inside an ``await`` expression, it returns an awaitable; elsewhere it
returns the result. The awaitable sends the call when it first runs and waits for its answer on the event
loop, so the calls of an ``asyncio.gather`` are in flight together (the results in the order of its
arguments). Under ``local`` a call always returns its result. Under both, ``parallel(functions)`` calls
each function (each makes one tool call), sends every call before it waits for any answer, and returns
the results in order (``cm_runtime.ToolCalls.parallel``).
"""

from __future__ import annotations

import ast
import builtins
import os
import sys
import traceback
import types
import warnings
from typing import Any

from cm_constructs import refusal, unsupported
from cm_guard import harden_interpreter, run_imports
from cm_protocol import (
    AwaitableCalls,
    FinalAnswer,
    Output,
    ToolCalls,
    ToolError,
    error_info,
    syntax_error,
    tool_arguments,
)
from cm_runtime import define_compiled, skill_namespace

SCRIPT_FILENAME = "<script>"

_awaitable: AwaitableCalls | None = None
"""The running cpython script's rule for awaitable calls (set by ``run_cpython``; none under ``local``)."""


def dispatch(calls: ToolCalls, server: str, tool: str, arguments: Any, caller: types.FrameType | None) -> Any:
    """A tool call written in the frame ``caller``: made now, sent for ``parallel``, or an awaitable that
    sends it when awaited (by the script's rule). Arguments that are not JSON fail where the call is written."""
    payload = tool_arguments(server, tool, arguments)
    line = script_line(caller)
    return calls.dispatch(server, tool, payload, line, _awaitable is not None and _awaitable.wanted(caller))


_current_line: list[int | None] = [None]
"""The line of the script's AST node the ``local`` interpreter is evaluating (``patch_line_tracking``)."""


def script_line(frame: types.FrameType | None) -> int | None:
    """The script's line that made a call: the nearest frame of the script's own code (cpython), else the
    node the ``local`` interpreter is at."""
    while frame is not None:
        if frame.f_code.co_filename == SCRIPT_FILENAME:
            return frame.f_lineno
        frame = frame.f_back
    return _current_line[0]


def confined_open(workspace: str) -> Any:
    real_open = builtins.open

    def open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if not isinstance(file, str | os.PathLike):
            raise TypeError("open() takes a path in the workspace")
        path = os.path.realpath(os.path.join(workspace, os.fspath(file)))
        if path != workspace and not path.startswith(workspace + os.sep):
            raise PermissionError(f"{file}: only files inside the run's workspace can be opened")
        return real_open(path, mode, *args, **kwargs)

    return open


def import_interpreter() -> None:
    """Import smolagents' interpreter without smolagents/__init__ (which pulls in the agent stack: ~1 s), and
    without jinja2, which ``smolagents.utils`` imports for exporting agents only (a third of the zygote's
    import time): a placeholder stands in while the interpreter is imported and is taken out of
    ``sys.modules`` at once, so a run that may import the real jinja2 (a package environment) gets it."""
    import importlib.util

    if "smolagents" not in sys.modules:
        spec = importlib.util.find_spec("smolagents")
        if spec is not None and spec.submodule_search_locations:
            package = types.ModuleType("smolagents")
            package.__path__ = list(spec.submodule_search_locations)
            sys.modules["smolagents"] = package
            tools = types.ModuleType("smolagents.tools")
            tools.Tool = object  # type: ignore[attr-defined]  # only used in a type annotation there
            sys.modules["smolagents.tools"] = tools
    placeholder = "jinja2" not in sys.modules
    if placeholder:
        sys.modules["jinja2"] = types.ModuleType("jinja2", "not imported: the interpreter never renders templates")
    try:
        importlib.import_module("smolagents.local_python_executor")
    finally:
        if placeholder:
            del sys.modules["jinja2"]
    harden_interpreter()


def patch_line_tracking() -> None:
    """Make every exception remember the innermost AST node (the user's line) it passed through."""
    from smolagents import local_python_executor as lpe

    original = lpe.evaluate_ast

    def evaluate_ast(expression: Any, *args: Any, **kwargs: Any) -> Any:
        line = getattr(expression, "lineno", None)
        if line is not None:
            _current_line[0] = line
        try:
            return original(expression, *args, **kwargs)
        except BaseException as exc:
            if getattr(exc, "_cm_line", None) is None and getattr(expression, "lineno", None) is not None:
                try:
                    exc._cm_line = expression.lineno  # type: ignore[attr-defined]
                except AttributeError:
                    pass
            raise

    lpe.evaluate_ast = evaluate_ast

    # smolagents copies a module's attributes (recursively) on every import, which takes over a second
    # for numpy or pandas. The copy depends only on the module, so make it once, in the zygote.
    copy_module = lpe.get_safe_module
    copies: dict[int, Any] = {}

    def get_safe_module(raw_module: Any, authorized_imports: Any, visited: Any = None) -> Any:
        if visited is not None:
            return copy_module(raw_module, authorized_imports, visited)
        key = id(raw_module)
        if key not in copies:
            copies[key] = copy_module(raw_module, authorized_imports)
        return copies[key]

    lpe.get_safe_module = get_safe_module


def run_local(
    code: str,
    tools: dict[str, Any],
    output: Output,
    workspace: str,
    imports: list[str],
    kept: dict[str, Any] | None = None,
    skills: Any = None,
) -> dict[str, Any]:
    """Run ``code`` in smolagents' interpreter; ``kept`` (a session's) holds its state and the functions and
    classes it defined from one run to the next; ``skills`` are the saved skills it may call."""
    from smolagents import local_python_executor as lpe

    harden_interpreter()  # done in the zygote already (import_interpreter); here in case a caller skipped it
    run_imports[:] = imports
    try:
        tree = ast.parse(code)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(tree, "<script>", "exec")  # the compiler's own checks (`return` outside a function ...); not run
    except SyntaxError as exc:
        return {"success": False, "error": syntax_error(exc)}
    findings = unsupported(code)
    if findings:  # refused before any line runs: no side effect first
        return {"success": False, "error": refusal(code, findings)}

    def final_answer(value: Any = None) -> Any:
        raise FinalAnswer(value)

    static_tools = {
        **lpe.BASE_PYTHON_TOOLS,
        "open": confined_open(workspace),
        **{f.__name__: f for f in (repr, staticmethod, classmethod, property)},
        "final_answer": final_answer,
        "ToolError": ToolError,
        **tools,
    }
    if skills:
        static_tools["skills"] = skill_namespace(skills, _local_skill(static_tools, output, imports))
    state: dict[str, Any] = (
        {"__name__": "__main__"} if kept is None else kept.setdefault("state", {"__name__": "__main__"})
    )
    state.update(_print_outputs=output, _operations_count={"counter": 0})
    custom_tools: dict[str, Any] = (
        {} if kept is None else kept.setdefault("custom_tools", {})
    )  # what the script defines
    value: Any = None
    try:
        for node in tree.body:
            value = lpe.evaluate_ast(node, state, static_tools, custom_tools, imports)
        returned = value if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        return {"success": True, "value": returned}
    except FinalAnswer as answer:
        return {"success": True, "value": answer.value}
    except Exception as exc:  # the script's own error: reported, not raised
        line = getattr(exc, "_cm_line", None)
        source = code.splitlines()[line - 1].strip() if line and line <= len(code.splitlines()) else None
        return {"success": False, "error": error_info(exc, line, f"line {line}: {source}" if source else None)}


def _local_skill(static_tools: dict[str, Any], output: Output, imports: list[str]) -> Any:
    """How a skill is defined under ``local``: its code evaluated by the same AST interpreter, with the same
    tools, import allow-list and refusals as the script (never compiled as plain Python), in its own state."""
    from smolagents import local_python_executor as lpe

    def define(spec: dict[str, Any]) -> Any:
        source = str(spec.get("source") or "")
        name = spec["name"]
        findings = unsupported(source)
        if findings:
            raise ToolError(f"skills.{name} cannot run here: {refusal(source, findings)['message']}")
        state: dict[str, Any] = {
            "__name__": f"skill_{name}",
            "_print_outputs": output,
            "_operations_count": {"counter": 0},
        }
        custom: dict[str, Any] = {}
        entry = str(spec.get("entry") or name)
        function: Any = None
        for node in ast.parse(source).body:
            value = lpe.evaluate_ast(node, state, static_tools, custom, imports)
            if isinstance(node, ast.FunctionDef) and node.name == entry:
                function = value
        if not callable(function):
            raise ToolError(f"skills.{name}: its code defines no function {spec.get('entry')!r}")
        return function

    return define


def run_cpython(
    code: str, tools: dict[str, Any], output: Output, kept: dict[str, Any] | None = None, skills: Any = None
) -> dict[str, Any]:
    """Run ``code`` as ``__main__``; ``kept`` (a session's) is its globals from one run to the next; ``skills`` are
    the saved skills it may call."""
    import asyncio
    import inspect

    global _awaitable
    flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    try:
        tree = ast.parse(code, SCRIPT_FILENAME)
        rule = AwaitableCalls(tree, SCRIPT_FILENAME)
        last: types.CodeType | None = None
        if tree.body and isinstance(final := tree.body[-1], ast.Expr):
            tree.body.pop()
            expression: types.CodeType = compile(ast.Expression(final.value), SCRIPT_FILENAME, "eval", flags=flags)
            rule.include(expression)
            last = expression
        compiled = compile(tree, SCRIPT_FILENAME, "exec", flags=flags)
        rule.include(compiled)
    except SyntaxError as exc:
        return {"success": False, "error": syntax_error(exc)}
    _awaitable = rule

    def final_answer(value: Any = None) -> Any:
        raise FinalAnswer(value)

    namespace: dict[str, Any] = {} if kept is None else kept
    namespace.update(__name__="__main__", __builtins__=builtins, **tools)
    namespace.update(ToolError=ToolError, final_answer=final_answer)
    if skills:  # a skill sees the stubs and the other skills, not the script's variables (nor a session's)
        base: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins, **tools}
        base.update(ToolError=ToolError, final_answer=final_answer)
        namespace["skills"] = base["skills"] = skill_namespace(skills, lambda spec: define_compiled(spec, base))
    sys.stdout = sys.stderr = output  # type: ignore[assignment]
    try:
        body = eval(compiled, namespace)
        if inspect.iscoroutine(body):
            asyncio.run(body)
        value = eval(last, namespace) if last is not None else None
        if inspect.iscoroutine(value):
            value = asyncio.run(value)
        return {"success": True, "value": value}
    except FinalAnswer as answer:
        return {"success": True, "value": answer.value}
    except SystemExit as exc:
        if exc.code in (None, 0):
            return {"success": True, "value": None}
        return {"success": False, "error": error_info(exc, _script_line(exc), f"exit status {exc.code!r}")}
    except BaseException as exc:  # the script's own error, whatever it is: reported, not raised
        return {"success": False, "error": error_info(exc, _script_line(exc), _script_traceback(exc, code))}
    finally:
        sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
        _awaitable = None


def _script_frames(exc: BaseException) -> list[traceback.FrameSummary]:
    return [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == SCRIPT_FILENAME]


def _script_line(exc: BaseException) -> int | None:
    frames = _script_frames(exc)
    return frames[-1].lineno if frames else None


def _script_traceback(exc: BaseException, code: str) -> str | None:
    lines = code.splitlines()
    out = []
    for frame in _script_frames(exc):
        lineno = frame.lineno or 0
        source = lines[lineno - 1].strip() if 0 < lineno <= len(lines) else ""
        where = "" if frame.name == "<module>" else f", in {frame.name}"
        out.append(f"  line {lineno}{where}: {source}")
    if not out:
        return None
    return "Traceback (script lines):\n" + "\n".join(out) + f"\n{type(exc).__name__}: {exc}"
