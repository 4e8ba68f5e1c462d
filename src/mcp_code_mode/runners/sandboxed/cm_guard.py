"""Hardening of smolagents' AST interpreter for the ``local`` runner (inside the sandbox; standard library only).

smolagents refuses dunder attributes in ``a.b`` syntax and in its ``getattr`` tool, unlisted imports and
unlisted builtins. It leaves open every other path from a name to an object: non-dunder internals
(a generator's ``gi_frame`` holds the interpreter's live state), private module helpers
(``uuid._get_command_stdout``), the standard library's own attribute walkers (``operator.attrgetter``,
``str.format`` field paths, ``string.Formatter``) and the places the standard library evaluates strings
(``typing.get_type_hints``, the code ``dataclasses`` compiles from field names). ``harden_interpreter``
closes those: one attribute policy (``_check_attribute``) for every way of reading an attribute, one value
policy (``_check_value``) for every value the script can hold, and guarded copies of the walkers.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import types
import weakref
from typing import Any

from cm_runtime import ToolError
from cm_semantics import install as install_semantics

INTERNALS = frozenset(
    {
        *("gi_frame", "gi_code", "gi_yieldfrom", "gi_running", "gi_suspended"),
        *("cr_frame", "cr_code", "cr_await", "cr_origin", "cr_running", "cr_suspended"),
        *("ag_frame", "ag_code", "ag_await", "ag_running"),
        *("f_back", "f_builtins", "f_code", "f_globals", "f_locals", "f_trace", "f_lasti", "f_lineno"),
        *("tb_frame", "tb_next", "tb_lasti", "tb_lineno", "cell_contents"),
    }
)
"""Attribute names of frames, code, generators, coroutines, tracebacks and cells: refused on any object."""

NAMEDTUPLE_API = frozenset({"_asdict", "_replace", "_make", "_fields", "_field_defaults"})
"""The one documented private-looking API of the standard library, allowed on tuples."""

ALLOWED_DUNDER_CALLS = frozenset({"__init__", "__str__", "__repr__"})
"""Dunder methods a script may call as ``x.__init__(...)`` (``super().__init__()``), as smolagents allows."""

DANGEROUS_MODULES = frozenset(
    {
        *("os", "posix", "nt", "posixpath", "sys", "subprocess", "_posixsubprocess", "io", "_io", "shutil"),
        *("socket", "_socket", "ctypes", "_ctypes", "importlib", "_imp", "signal", "_signal", "pty", "gc"),
        *("marshal", "pickle", "_pickle", "inspect", "resource", "mmap", "fcntl", "select", "_thread"),
        *("threading", "multiprocessing", "code", "codeop", "runpy", "pathlib", "builtins"),
    }
)
"""Modules whose functions a script may not hold, however it reached them."""

_INTERNAL_TYPES = (types.FrameType, types.CodeType, types.TracebackType, types.CellType)
_CALLABLES = (types.FunctionType, types.BuiltinFunctionType, types.MethodType)
_SCRIPT_CLASSES: weakref.WeakSet[type] = weakref.WeakSet()
run_imports: list[str] = []  # the running script's allow-list (one script per process)
_hardened = False


def _refuse(message: str) -> Exception:
    from smolagents.local_python_executor import InterpreterError

    return InterpreterError(f"{message} (refused by the local runner's interpreter)")


def _is_dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__")


def _authorized(module_name: str) -> bool:
    from smolagents.local_python_executor import check_import_authorized

    return check_import_authorized(module_name, run_imports)


def _scripted(obj: Any) -> bool:
    """Whether ``obj`` is a class the script defined, or an instance of one."""
    klass = obj if isinstance(obj, type) else type(obj)
    return klass in _SCRIPT_CLASSES


def _script_owned(obj: Any, name: str) -> bool:
    """Whether the private attribute ``name`` of ``obj`` is the script's own (set or defined by its code)."""
    if name in NAMEDTUPLE_API and (isinstance(obj, tuple) or (isinstance(obj, type) and issubclass(obj, tuple))):
        return True
    if isinstance(obj, type):
        owners = obj.__mro__
    else:
        if _scripted(obj) and name in (getattr(obj, "__dict__", None) or {}):
            return True
        owners = type(obj).__mro__
    for klass in owners:
        if name in vars(klass):
            return klass in _SCRIPT_CLASSES
    return _scripted(obj)  # not defined anywhere yet: a script class's own __getattr__ or a new attribute


def _check_attribute(obj: Any, name: str, *, dunder_call: bool = False) -> None:
    """Refuse reading ``obj.name`` unless it is an ordinary attribute (the one policy for every way of reading one)."""
    if _is_dunder(name):
        if not (dunder_call and name in ALLOWED_DUNDER_CALLS):
            raise _refuse(f"Forbidden access to dunder attribute: {name}")
    elif name in INTERNALS or isinstance(obj, _INTERNAL_TYPES):
        raise _refuse(f"Forbidden access to interpreter internals: {name} (frames, code and tracebacks)")
    elif isinstance(obj, types.ModuleType):
        if not _authorized(obj.__name__):
            raise _refuse(f"Forbidden access to module: {obj.__name__}")
        if name.startswith("_"):
            raise _refuse(f"Forbidden access to private module attribute: {obj.__name__}.{name}")
    elif name.startswith("_") and not _script_owned(obj, name):
        raise _refuse(f"Forbidden access to private attribute of a library object: {type(obj).__name__}.{name}")


def _check_value(value: Any, static_tools: Any = None) -> None:
    """Refuse a value the script may not hold: interpreter internals, a function of a dangerous module, an
    unlisted builtin (smolagents' own check, for unlisted modules and eval/exec, runs first)."""
    if isinstance(value, _INTERNAL_TYPES):
        raise _refuse(f"Forbidden access to interpreter internals: a {type(value).__name__} object")
    if isinstance(value, _CALLABLES):
        module = getattr(value, "__module__", None)
        if isinstance(value, types.BuiltinFunctionType) and getattr(value, "__self__", None) is builtins:
            if static_tools is not None and not any(value is tool for tool in static_tools.values()):
                raise _refuse(f"Forbidden access to builtin function: {value.__name__}")
        elif module in DANGEROUS_MODULES:
            raise _refuse(f"Forbidden access to function: {module}.{getattr(value, '__name__', '?')}")


def _guarded(obj: Any, name: str, *, dunder_call: bool = False) -> Any:
    """``getattr(obj, name)`` under the attribute and value policies; ``str.format`` comes back guarded."""
    from smolagents import local_python_executor as lpe

    check_safer_result: Any = lpe.check_safer_result  # the hardened one: smolagents' and ``_check_value``
    _check_attribute(obj, name, dunder_call=dunder_call)
    value = getattr(obj, name)
    if name in ("format", "format_map"):
        if value is str.format:
            return _safe_str_format
        if value is str.format_map:
            return _safe_str_format_map
        if isinstance(value, types.BuiltinMethodType) and isinstance(getattr(value, "__self__", None), str):
            template: Any = value.__self__
            if name == "format":
                return lambda *args, **kwargs: _safe_str_format(template, *args, **kwargs)
            return lambda mapping: _safe_str_format_map(template, mapping)
    check_safer_result(value, None, run_imports)
    return value


def _walk(obj: Any, path: str, what: str) -> Any:
    """Follow a dotted attribute path (``attrgetter``, format fields): no part may even start with ``_``."""
    for part in path.split("."):
        if part.startswith("_") or part in INTERNALS:
            raise _refuse(f"Forbidden attribute in {what}: {part!r} of {path!r}")
        obj = _guarded(obj, part)
    return obj


def safe_getattr(obj: Any, name: Any, *default: Any) -> Any:
    """The script's ``getattr``: the same policy as ``obj.name``."""
    if not isinstance(name, str):
        raise TypeError("getattr(): attribute name must be a string")
    try:
        return _guarded(obj, name)
    except AttributeError:
        if default:
            return default[0]
        raise


def safe_setattr(obj: Any, name: str, value: Any) -> None:
    """The script's ``setattr``: the same policy as ``obj.name = value``."""
    _check_write(obj, name)
    setattr(obj, name, value)


def _check_write(obj: Any, name: str) -> None:
    if _is_dunder(name) or name in INTERNALS or isinstance(obj, _INTERNAL_TYPES):
        raise _refuse(f"Forbidden assignment to attribute: {name}")
    if name.startswith("_") and not (_scripted(obj) or isinstance(obj, types.ModuleType)):
        raise _refuse(f"Forbidden assignment to private attribute of a library object: {type(obj).__name__}.{name}")


def safe_attrgetter(*paths: Any) -> Any:
    """``operator.attrgetter`` under the attribute policy."""
    for path in paths:
        if not isinstance(path, str):
            raise TypeError("attribute name must be a string")
        if any(part.startswith("_") or part in INTERNALS for part in path.split(".")):
            raise _refuse(f"Forbidden attribute in operator.attrgetter: {path!r}")

    def get(obj: Any) -> Any:
        values = tuple(_walk(obj, path, "operator.attrgetter") for path in paths)
        return values[0] if len(values) == 1 else values

    return get


def safe_methodcaller(name: Any, /, *args: Any, **kwargs: Any) -> Any:
    """``operator.methodcaller`` under the attribute policy."""
    if not isinstance(name, str):
        raise TypeError("method name must be a string")
    if name.startswith("_") or name in INTERNALS:
        raise _refuse(f"Forbidden method in operator.methodcaller: {name!r}")

    def call(obj: Any) -> Any:
        return _guarded(obj, name)(*args, **kwargs)

    return call


def _make_formatter() -> type:
    """``string.Formatter`` with a guarded ``get_field``; a copy, so the original is not in its mro."""
    import string

    def get_field(self: Any, field_name: str, args: Any, kwargs: Any) -> Any:
        parser: Any = importlib.import_module("_string")  # the parser str.format itself uses

        first, rest = parser.formatter_field_name_split(field_name)
        obj = self.get_value(first, args, kwargs)
        for is_attr, key in rest:
            if is_attr:
                obj = _walk(obj, key, f"format field {{{field_name}}}")
            else:
                obj = obj[key]
                _check_value(obj)
        return obj, first

    namespace = {k: v for k, v in vars(string.Formatter).items() if k not in ("__dict__", "__weakref__")}
    namespace["get_field"] = get_field
    return type("Formatter", (), namespace)


_formatter: Any = None


def _safe_str_format(template: Any, /, *args: Any, **kwargs: Any) -> str:
    """``str.format`` with guarded field paths: ``{0.name}`` reads only ordinary public attributes."""
    if not isinstance(template, str):
        raise TypeError("descriptor 'format' requires a 'str' object")
    return _formatter().vformat(template, args, kwargs)


def _safe_str_format_map(template: Any, mapping: Any, /) -> str:
    if not isinstance(template, str):
        raise TypeError("descriptor 'format_map' requires a 'str' object")
    return _formatter().vformat(template, (), mapping)


def _has_forward_ref(annotation: Any, depth: int = 0) -> bool:
    import typing

    if isinstance(annotation, str | typing.ForwardRef):
        return True
    args = getattr(annotation, "__args__", None)
    return depth < 20 and isinstance(args, tuple) and any(_has_forward_ref(a, depth + 1) for a in args)


def _guard_type_hints(get_type_hints: Any) -> Any:
    """``typing.get_type_hints`` that refuses string annotations: evaluating them is ``eval`` in CPython."""

    def guarded_get_type_hints(obj: Any, *args: Any, **kwargs: Any) -> Any:
        owners = obj.__mro__ if isinstance(obj, type) else (obj,)
        for owner in owners:
            annotations = getattr(owner, "__annotations__", None)
            if isinstance(annotations, dict) and any(_has_forward_ref(a) for a in annotations.values()):
                raise _refuse("typing.get_type_hints does not evaluate string annotations")
        return get_type_hints(obj, *args, **kwargs)

    guarded_get_type_hints.__name__ = "get_type_hints"
    return guarded_get_type_hints


def _guard_singledispatch(singledispatch: Any) -> Any:
    """``functools.singledispatch`` whose ``register(func)`` refuses string annotations (it resolves them
    with ``typing.get_type_hints``, that is ``eval``)."""
    guard = _guard_type_hints(lambda obj: None)

    def guarded_singledispatch(func: Any) -> Any:
        dispatcher = singledispatch(func)
        register = dispatcher.register

        def guarded_register(cls: Any, func: Any = None) -> Any:
            if func is None and not isinstance(cls, type):
                guard(cls)
            return register(cls, func)

        dispatcher.register = guarded_register
        return dispatcher

    guarded_singledispatch.__name__ = "singledispatch"
    return guarded_singledispatch


def _refused_helper(name: str) -> Any:
    def refused(*args: Any, **kwargs: Any) -> Any:
        raise _refuse(f"{name} is not available")

    refused.__name__ = name.rsplit(".", 1)[-1]
    return refused


def _guard_dataclass(dataclass: Any) -> Any:
    """``dataclasses.dataclass`` that refuses field names that are not identifiers (it compiles them into code)."""
    import keyword

    def check(cls: Any) -> None:
        for name in vars(cls).get("__annotations__", {}):
            if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
                raise _refuse(f"dataclass field name is not an identifier: {name!r}")

    def guarded_dataclass(cls: Any = None, /, **options: Any) -> Any:
        if cls is None:
            decorate = dataclass(**options)

            def wrap(klass: Any) -> Any:
                check(klass)
                return decorate(klass)

            return wrap
        check(cls)
        return dataclass(cls, **options)

    guarded_dataclass.__name__ = "dataclass"
    return guarded_dataclass


def _guard_update_wrapper(update_wrapper: Any) -> Any:
    """``functools.update_wrapper``/``wraps`` with only the default attribute names (custom ones walk dunders)."""
    import functools

    takes = 2 if update_wrapper.__name__ == "update_wrapper" else 1  # (wrapper,) wrapped, assigned, updated

    def guarded(*args: Any, **kwargs: Any) -> Any:
        extra: dict[str, Any] = dict(zip(("assigned", "updated"), args[takes:], strict=False))
        for key, default in (("assigned", functools.WRAPPER_ASSIGNMENTS), ("updated", functools.WRAPPER_UPDATES)):
            names = kwargs.get(key, extra.get(key, ()))
            if any(name not in default for name in names):
                raise _refuse(f"functools.{update_wrapper.__name__} with {key} names beyond the defaults")
        return update_wrapper(*args, **kwargs)

    guarded.__name__ = update_wrapper.__name__
    return guarded


def harden_interpreter() -> None:
    """Close the escapes smolagents' interpreter leaves open (see above). Idempotent; in the zygote, before
    any module is copied for a script."""
    global _hardened, _formatter
    if _hardened:
        return
    import dataclasses
    import functools
    import operator
    import string
    import typing

    from smolagents import local_python_executor as lpe

    install_semantics()  # first: the checks below wrap the corrected evaluators
    _formatter = _make_formatter()
    # dataclass compiles field names into code: patched in this (sandbox) process, so make_dataclass and
    # every other path to it are guarded (it refuses only what would not compile).
    dataclasses.dataclass = _guard_dataclass(dataclasses.dataclass)
    # The evaluators and attribute walkers: replaced in every copy of a module a script imports (not in
    # the real modules: whitelisted packages may resolve their own string annotations).
    replacements: dict[int, Any] = {
        id(typing.get_type_hints): _guard_type_hints(typing.get_type_hints),
        id(functools.singledispatch): _guard_singledispatch(functools.singledispatch),
        id(functools.singledispatchmethod): _refused_helper("functools.singledispatchmethod"),
        id(operator.attrgetter): safe_attrgetter,
        id(operator.methodcaller): safe_methodcaller,
        id(string.Formatter): _formatter,
        id(functools.update_wrapper): _guard_update_wrapper(functools.update_wrapper),
        id(functools.wraps): _guard_update_wrapper(functools.wraps),
    }
    lpe.BASE_PYTHON_TOOLS["getattr"] = safe_getattr
    lpe.BASE_PYTHON_TOOLS["setattr"] = safe_setattr

    copy_module = lpe.get_safe_module

    def get_safe_module(raw_module: Any, authorized_imports: Any, visited: Any = None) -> Any:
        module = copy_module(raw_module, authorized_imports, visited)
        if isinstance(module, types.ModuleType) and module is not raw_module:
            for name, value in list(vars(module).items()):
                if id(value) in replacements:
                    setattr(module, name, replacements[id(value)])
        return module

    lpe.get_safe_module = get_safe_module

    check_result = lpe.check_safer_result

    def check_safer_result(result: Any, static_tools: Any = None, authorized_imports: Any = None) -> None:
        check_result(result, static_tools, authorized_imports)
        _check_value(result, static_tools)

    lpe.check_safer_result = check_safer_result

    def evaluate_attribute(expression: ast.Attribute, state: Any, static_tools: Any, custom_tools: Any, imports: Any):
        if _is_dunder(expression.attr):  # before evaluating the object, as smolagents does
            raise _refuse(f"Forbidden access to dunder attribute: {expression.attr}")
        value = lpe.evaluate_ast(expression.value, state, static_tools, custom_tools, imports)
        return _guarded(value, expression.attr)

    lpe.evaluate_attribute = evaluate_attribute

    call = lpe.evaluate_call

    def evaluate_call(node: ast.Call, state: Any, static_tools: Any, custom_tools: Any, imports: Any) -> Any:
        """``obj.name(...)``: the method is read under the attribute policy, then called as smolagents calls
        a name (through a state slot no identifier can spell, so arguments still see the script's names)."""
        if not isinstance(node.func, ast.Attribute):
            return call(node, state, static_tools, custom_tools, imports)
        obj = lpe.evaluate_ast(node.func.value, state, static_tools, custom_tools, imports)
        try:
            method = _guarded(obj, node.func.attr, dunder_call=True)
        except AttributeError as exc:
            if isinstance(exc, ToolError):  # a stub namespace naming its tools: the script may catch it
                raise
            raise lpe.InterpreterError(f"Object {obj} has no attribute {node.func.attr}") from None
        slot = "." + node.func.attr
        resolved = ast.copy_location(ast.Call(ast.Name(slot, ast.Load()), node.args, node.keywords), node)
        missing = object()
        saved = state.get(slot, missing)
        state[slot] = method
        try:
            return call(resolved, state, static_tools, custom_tools, imports)
        finally:
            if saved is missing:
                state.pop(slot, None)
            else:
                state[slot] = saved

    lpe.evaluate_call = evaluate_call

    set_value = lpe.set_value

    def guarded_set_value(target: ast.AST, value: Any, state: Any, static_tools: Any, custom_tools: Any, imports: Any):
        if isinstance(target, ast.Attribute):
            obj = lpe.evaluate_ast(target.value, state, static_tools, custom_tools, imports)
            _check_write(obj, target.attr)
            setattr(obj, target.attr, value)
            return None
        return set_value(target, value, state, static_tools, custom_tools, imports)

    lpe.set_value = guarded_set_value

    for name in ("evaluate_augassign", "evaluate_delete", "evaluate_class_def"):
        setattr(lpe, name, _checking_attribute_targets(getattr(lpe, name)))

    evaluate_import = lpe.evaluate_import

    def guarded_import(expression: Any, state: dict[str, Any], authorized_imports: Any) -> Any:
        if isinstance(expression, ast.ImportFrom):
            for alias in expression.names:
                if alias.name.startswith("_"):
                    raise _refuse(f"Forbidden import of private name: {expression.module}.{alias.name}")
        before = dict(state)
        result = evaluate_import(expression, state, authorized_imports)
        for key, value in list(state.items()):
            if key not in before or before[key] is not value:
                try:
                    check_safer_result(value, None, authorized_imports)
                except lpe.InterpreterError:
                    state.pop(key)
                    raise
        return result

    lpe.evaluate_import = guarded_import
    _hardened = True


def _checking_attribute_targets(evaluate: Any) -> Any:
    """Wrap an evaluator so that no attribute target in its statement (``x.a += 1``, ``del x.a``, and
    the targets in a class body) names a dunder or an internal."""

    def checked(node: ast.AST, state: Any, static_tools: Any, custom_tools: Any, imports: Any) -> Any:
        body = node.body if isinstance(node, ast.ClassDef) else [node]
        for statement in body:
            targets = getattr(statement, "targets", None) or [getattr(statement, "target", None)]
            for target in targets:
                if isinstance(target, ast.Attribute) and (_is_dunder(target.attr) or target.attr in INTERNALS):
                    raise _refuse(f"Forbidden assignment to attribute: {target.attr}")
        result = evaluate(node, state, static_tools, custom_tools, imports)
        if isinstance(node, ast.ClassDef) and isinstance(result, type):
            _SCRIPT_CLASSES.add(result)
        return result

    return checked
