"""Corrections to smolagents' AST interpreter where it runs Python wrong (inside the sandbox; standard library only).

Left alone, smolagents ignores decorators (a decorated function returns the undecorated result, a
``@dataclass`` takes no arguments), binds arguments loosely (extra ones are dropped, defaults are
evaluated at each call, keyword-only defaults and positional-only parameters are lost), lets a method or
a nested function replace a global function of the same name, answers an undefined name with the value
of a similar one, lets ``except Exception`` catch a ``return``/``break``/``continue``, evaluates a class
body's names outside the class, ignores ``print``'s ``sep``/``end``, f-string conversions (``!r``, the
``=`` form), starred items in displays and nested ``for`` clauses of a generator expression, and refuses
``super()``. ``install`` replaces those evaluators. What it does not make work, ``cm_constructs`` refuses
before the script runs.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import weakref
from typing import Any

_OWNERS: weakref.WeakKeyDictionary[Any, type] = weakref.WeakKeyDictionary()
"""The class each script method was defined in (zero-argument ``super()`` needs it, as CPython's ``__class__``)."""
OWNER_SLOT = ".class"
SELF_SLOT = ".self"
"""State slots of a method call (no identifier can spell them): its class and its first argument."""
_installed = False


def _lpe() -> Any:
    from smolagents import local_python_executor as lpe

    return lpe


def _signature(args: ast.arguments, evaluate: Any) -> inspect.Signature:
    """The signature of a ``def`` or ``lambda``, its defaults evaluated now (at definition, as CPython does)."""
    empty = inspect.Parameter.empty
    positional = [*args.posonlyargs, *args.args]
    defaults = [evaluate(d) for d in args.defaults]
    first_default = len(positional) - len(defaults)
    params: list[inspect.Parameter] = []
    for index, arg in enumerate(positional):
        kind = (
            inspect.Parameter.POSITIONAL_ONLY
            if index < len(args.posonlyargs)
            else inspect.Parameter.POSITIONAL_OR_KEYWORD
        )
        default = defaults[index - first_default] if index >= first_default else empty
        params.append(inspect.Parameter(arg.arg, kind, default=default))
    if args.vararg is not None:
        params.append(inspect.Parameter(args.vararg.arg, inspect.Parameter.VAR_POSITIONAL))
    for arg, node in zip(args.kwonlyargs, args.kw_defaults, strict=True):
        default = empty if node is None else evaluate(node)
        params.append(inspect.Parameter(arg.arg, inspect.Parameter.KEYWORD_ONLY, default=default))
    if args.kwarg is not None:
        params.append(inspect.Parameter(args.kwarg.arg, inspect.Parameter.VAR_KEYWORD))
    return inspect.Signature(params)


def _bind(name: str, signature: inspect.Signature, args: Any, kwargs: Any) -> dict[str, Any]:
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError as exc:
        raise TypeError(f"{name}() {exc}") from None
    bound.apply_defaults()
    return dict(bound.arguments)


def make_function(func_def: ast.FunctionDef, state: dict[str, Any], static_tools: Any, custom_tools: Any, imports: Any):
    """A script function: arguments bound as CPython binds them, a fresh scope per call over ``state``."""
    lpe = _lpe()
    signature = _signature(
        func_def.args, lambda node: lpe.evaluate_ast(node, state, static_tools, custom_tools, imports)
    )

    def new_func(*args: Any, **kwargs: Any) -> Any:
        func_state = state.copy()
        func_state.update(_bind(func_def.name, signature, args, kwargs))
        owner = _OWNERS.get(new_func)
        if owner is not None:
            func_state[OWNER_SLOT] = owner
            if args:
                func_state[SELF_SLOT] = args[0]
        try:
            for statement in func_def.body:
                lpe.evaluate_ast(statement, func_state, static_tools, custom_tools, imports)
        except lpe.ReturnException as returned:
            return None if func_def.name == "__init__" else returned.value
        return None

    new_func.__name__ = new_func.__qualname__ = func_def.name
    new_func.__doc__ = ast.get_docstring(func_def)
    new_func.__module__ = "__main__"
    new_func.__signature__ = signature  # type: ignore[attr-defined]
    new_func.__ast__ = func_def  # type: ignore[attr-defined]  # as smolagents' own functions
    new_func.__source__ = ast.unparse(func_def)  # type: ignore[attr-defined]
    return new_func


def _define(func_def: ast.FunctionDef, scope: dict[str, Any], state: dict[str, Any], tools: tuple[Any, Any, Any]):
    """Evaluate the decorators (in ``scope``), make the function (over ``state``), apply the decorators."""
    lpe = _lpe()
    decorators = [lpe.evaluate_ast(d, scope, *tools) for d in func_def.decorator_list]
    value: Any = make_function(func_def, state, *tools)
    for decorator in reversed(decorators):
        value = decorator(value)
    return value


def evaluate_function_def(func_def: ast.FunctionDef, state: Any, static_tools: Any, custom_tools: Any, imports: Any):
    """A ``def``: bound in the current scope (a nested one stays local), decorators applied."""
    value = _define(func_def, state, state, (static_tools, custom_tools, imports))
    state[func_def.name] = value
    return value


def _methods(value: Any) -> list[Any]:
    if isinstance(value, staticmethod | classmethod):
        return [value.__func__]
    if isinstance(value, property):
        return [f for f in (value.fget, value.fset, value.fdel) if f is not None]
    return [value]


def evaluate_class_def(class_def: ast.ClassDef, state: Any, static_tools: Any, custom_tools: Any, imports: Any):
    """A ``class``: its body's names are seen by the body's later statements (not by its methods), methods
    do not leak into the enclosing scope, decorators are applied."""
    lpe = _lpe()
    tools = (static_tools, custom_tools, imports)
    decorators = [lpe.evaluate_ast(d, state, *tools) for d in class_def.decorator_list]
    bases = tuple(lpe.evaluate_ast(base, state, *tools) for base in class_def.bases)
    metaclass: Any = type
    for base in bases:
        if type(base) is not type:
            metaclass = type(base)
            break
    namespace: Any = metaclass.__prepare__(class_def.name, bases) if hasattr(metaclass, "__prepare__") else {}
    namespace["__module__"] = "__main__"
    namespace["__qualname__"] = class_def.name
    functions: list[Any] = []
    for index, statement in enumerate(class_def.body):
        scope = {**state, **namespace}
        if isinstance(statement, ast.FunctionDef):
            value = _define(statement, scope, state, tools)
            namespace[statement.name] = value
            functions += _methods(value)
        elif isinstance(statement, ast.Assign):
            value = lpe.evaluate_ast(statement.value, scope, *tools)
            for target in statement.targets:
                _assign_in_class(target, value, namespace, tools)
        elif isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
            annotation = lpe.evaluate_ast(statement.annotation, scope, *tools)
            namespace.setdefault("__annotations__", {})[statement.target.id] = annotation
            if statement.value is not None:
                namespace[statement.target.id] = lpe.evaluate_ast(statement.value, scope, *tools)
        elif isinstance(statement, ast.Pass):
            pass
        elif index == 0 and isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
            namespace["__doc__"] = statement.value.value
        else:
            raise lpe.InterpreterError(f"Unsupported statement in class body: {type(statement).__name__}")
    klass = metaclass(class_def.name, bases, namespace)
    for function in functions:
        try:
            _OWNERS.setdefault(function, klass)
        except TypeError:  # not weak-referenceable: a decorator's result that zero-argument super() cannot use
            pass
    value = klass
    for decorator in reversed(decorators):
        value = decorator(value)
    state[class_def.name] = value
    return value


def _assign_in_class(target: ast.AST, value: Any, namespace: Any, tools: tuple[Any, Any, Any]) -> None:
    if isinstance(target, ast.Name):
        namespace[target.id] = value
    elif isinstance(target, ast.Tuple | ast.List):
        scratch: dict[str, Any] = {}
        _lpe().set_value(target, value, scratch, *tools)
        for name, item in scratch.items():
            namespace[name] = item
    else:
        raise _lpe().InterpreterError("Only names can be assigned in a class body")


def evaluate_lambda(node: ast.Lambda, state: Any, static_tools: Any, custom_tools: Any, imports: Any):
    lpe = _lpe()
    signature = _signature(node.args, lambda d: lpe.evaluate_ast(d, state, static_tools, custom_tools, imports))

    def lambda_func(*args: Any, **kwargs: Any) -> Any:
        scope = state.copy()
        scope.update(_bind("<lambda>", signature, args, kwargs))
        return lpe.evaluate_ast(node.body, scope, static_tools, custom_tools, imports)

    lambda_func.__name__ = lambda_func.__qualname__ = "<lambda>"
    return lambda_func


def evaluate_name(name: ast.Name, state: Any, static_tools: Any, custom_tools: Any, imports: Any) -> Any:
    """A name, or ``NameError``: never the value of a similarly spelled one (smolagents' fallback)."""
    lpe = _lpe()
    if name.id in state or name.id in static_tools or name.id in custom_tools or name.id in lpe.ERRORS:
        return _original["evaluate_name"](name, state, static_tools, custom_tools, imports)
    raise NameError(f"name {name.id!r} is not defined")


def _control() -> tuple[type[BaseException], ...]:
    lpe = _lpe()
    return (lpe.ReturnException, lpe.BreakException, lpe.ContinueException)


def evaluate_try(node: ast.Try, state: Any, static_tools: Any, custom_tools: Any, imports: Any) -> None:
    """``try``: a ``return``, ``break`` or ``continue`` passes through the handlers, as in CPython."""
    lpe = _lpe()
    tools = (static_tools, custom_tools, imports)
    try:
        try:
            for statement in node.body:
                lpe.evaluate_ast(statement, state, *tools)
        except _control():
            raise
        except Exception as error:
            for handler in node.handlers:
                if handler.type is None or isinstance(error, lpe.evaluate_ast(handler.type, state, *tools)):
                    if handler.name:
                        state[handler.name] = error
                    for statement in handler.body:
                        lpe.evaluate_ast(statement, state, *tools)
                    break
            else:
                raise
        else:
            for statement in node.orelse:
                lpe.evaluate_ast(statement, state, *tools)
    finally:
        for statement in node.finalbody:
            lpe.evaluate_ast(statement, state, *tools)


def evaluate_with(node: ast.With, state: Any, static_tools: Any, custom_tools: Any, imports: Any) -> None:
    """``with``: a ``return``, ``break`` or ``continue`` leaves the block normally (no context manager sees
    it as an error it could suppress)."""
    lpe = _lpe()
    tools = (static_tools, custom_tools, imports)
    contexts: list[Any] = []
    try:
        for item in node.items:
            context = lpe.evaluate_ast(item.context_expr, state, *tools)
            entered = context.__enter__()
            contexts.append(context)
            if isinstance(item.optional_vars, ast.Name):  # a plain name, as smolagents binds it (cm_constructs)
                state[item.optional_vars.id] = entered
        for statement in node.body:
            lpe.evaluate_ast(statement, state, *tools)
    except _control():
        for context in reversed(contexts):
            context.__exit__(None, None, None)
        raise
    except Exception as error:
        pending: BaseException | None = error
        for context in reversed(contexts):
            try:
                if pending is None:
                    context.__exit__(None, None, None)
                elif context.__exit__(type(pending), pending, pending.__traceback__):
                    pending = None
            except Exception as raised:
                pending = raised
        if pending is not None:
            raise pending from None if pending is error else pending.__context__
    else:
        for context in reversed(contexts):
            context.__exit__(None, None, None)


def _call(node: ast.Call, state: Any, static_tools: Any, custom_tools: Any, imports: Any) -> Any:
    """``super()`` and ``print(..., sep=, end=)`` (unless the script rebound them); every other call as before."""
    if isinstance(node.func, ast.Name) and node.func.id in ("super", "print") and node.func.id not in state:
        lpe = _lpe()
        args: list[Any] = []
        for arg in node.args:
            value = lpe.evaluate_ast(
                arg.value if isinstance(arg, ast.Starred) else arg, state, static_tools, custom_tools, imports
            )
            args += list(value) if isinstance(arg, ast.Starred) else [value]
        kwargs: dict[str, Any] = {}
        for keyword in node.keywords:
            value = lpe.evaluate_ast(keyword.value, state, static_tools, custom_tools, imports)
            kwargs.update(value if keyword.arg is None else {keyword.arg: value})
        return _super(state, args, kwargs) if node.func.id == "super" else _print(state, args, kwargs)
    return _original["evaluate_call"](node, state, static_tools, custom_tools, imports)


def _super(state: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
    lpe = _lpe()
    if kwargs:
        raise TypeError("super() takes no keyword arguments")
    if not args:
        if OWNER_SLOT not in state or SELF_SLOT not in state:
            raise RuntimeError("super(): no arguments, outside a method of a class")
        return builtins.super(state[OWNER_SLOT], state[SELF_SLOT])
    if len(args) != 2 or not isinstance(args[0], type):
        raise lpe.InterpreterError("super() takes no arguments, or a class and an instance")
    return builtins.super(args[0], args[1])


def _print(state: Any, args: list[Any], kwargs: dict[str, Any]) -> None:
    unknown = set(kwargs) - {"sep", "end", "flush"}
    if unknown:
        raise TypeError(
            f"print() got unsupported keyword arguments: {', '.join(sorted(unknown))} (output goes to the run's output)"
        )
    sep = " " if kwargs.get("sep") is None else kwargs["sep"]
    end = "\n" if kwargs.get("end") is None else kwargs["end"]
    if not isinstance(sep, str) or not isinstance(end, str):
        raise TypeError("print(): sep and end must be strings or None")
    state["_print_outputs"] += sep.join(map(str, args)) + end


_CONVERSIONS = {ord("r"): repr, ord("s"): str, ord("a"): ascii}


def _evaluate(node: ast.AST, state: Any, static_tools: Any, custom_tools: Any, imports: Any) -> Any:
    """The node kinds smolagents evaluates wrong (inline, in ``evaluate_ast``); every other one as before."""
    lpe = _lpe()
    tools = (static_tools, custom_tools, imports)
    kind = type(node)
    if kind is ast.FormattedValue:
        assert isinstance(node, ast.FormattedValue)
        value = lpe.evaluate_ast(node.value, state, *tools)
        if node.conversion in _CONVERSIONS:
            value = _CONVERSIONS[node.conversion](value)
        spec = "" if node.format_spec is None else lpe.evaluate_ast(node.format_spec, state, *tools)
        return format(value, spec)
    if kind in (ast.List, ast.Tuple, ast.Set) and any(isinstance(e, ast.Starred) for e in node.elts):  # type: ignore[attr-defined]
        items: list[Any] = []
        for element in node.elts:  # type: ignore[attr-defined]
            if isinstance(element, ast.Starred):
                items += list(lpe.evaluate_ast(element.value, state, *tools))
            else:
                items.append(lpe.evaluate_ast(element, state, *tools))
        return {ast.List: list, ast.Tuple: tuple, ast.Set: set}[kind](items)
    if kind is ast.Dict and None in node.keys:  # type: ignore[attr-defined]
        assert isinstance(node, ast.Dict)
        result: dict[Any, Any] = {}
        for key, value_node in zip(node.keys, node.values, strict=True):
            value = lpe.evaluate_ast(value_node, state, *tools)
            if key is None:
                result.update(value)
            else:
                result[lpe.evaluate_ast(key, state, *tools)] = value
        return result
    if kind is ast.GeneratorExp and len(node.generators) > 1:  # type: ignore[attr-defined]
        assert isinstance(node, ast.GeneratorExp)
        element = node.elt
        return lpe._evaluate_comprehensions(
            node.generators, lambda scope: lpe.evaluate_ast(element, scope, *tools), state, *tools
        )
    return _original["evaluate_ast"](node, state, static_tools, custom_tools, imports)


def set_value(target: ast.AST, value: Any, state: Any, static_tools: Any, custom_tools: Any, imports: Any) -> None:
    """Unpacking into a tuple or list target, with at most one starred name (``a, *rest = ...``)."""
    lpe = _lpe()
    if not isinstance(target, ast.Tuple | ast.List):
        return _original["set_value"](target, value, state, static_tools, custom_tools, imports)
    items = list(value)
    stars = [i for i, element in enumerate(target.elts) if isinstance(element, ast.Starred)]
    if len(stars) > 1:
        raise SyntaxError("multiple starred expressions in assignment")
    if not stars:
        if len(items) != len(target.elts):
            few = len(items) < len(target.elts)
            amount = "not enough" if few else "too many"
            raise ValueError(f"{amount} values to unpack (expected {len(target.elts)}, got {len(items)})")
        pairs = list(zip(target.elts, items, strict=True))
    else:
        star = stars[0]
        after = len(target.elts) - star - 1
        if len(items) < star + after:
            raise ValueError(f"not enough values to unpack (expected at least {star + after}, got {len(items)})")
        rest = items[star : len(items) - after]
        starred = target.elts[star]
        assert isinstance(starred, ast.Starred)
        pairs = [*zip(target.elts[:star], items[:star], strict=True), (starred.value, rest)]
        pairs += zip(target.elts[star + 1 :], items[len(items) - after :], strict=True)
    for element, item in pairs:
        lpe.set_value(element, item, state, static_tools, custom_tools, imports)
    return None


_original: dict[str, Any] = {}


def install() -> None:
    """Replace smolagents' evaluators (idempotent). Before ``cm_guard`` wraps them, so its checks apply to these."""
    global _installed
    if _installed:
        return
    lpe = _lpe()
    for name in ("evaluate_ast", "evaluate_name", "evaluate_call", "set_value"):
        _original[name] = getattr(lpe, name)
    lpe.evaluate_ast = _evaluate
    lpe.evaluate_name = evaluate_name
    lpe.evaluate_call = _call
    lpe.set_value = set_value
    lpe.create_function = make_function
    lpe.evaluate_function_def = evaluate_function_def
    lpe.evaluate_class_def = evaluate_class_def
    lpe.evaluate_lambda = evaluate_lambda
    lpe.evaluate_try = evaluate_try
    lpe.evaluate_with = evaluate_with
    _installed = True
