"""Turning server, tool and parameter names into identifiers, with deterministic collision handling."""

from __future__ import annotations

import builtins
import keyword
import re
from collections.abc import Iterable

# Names the sandbox defines itself; a server or tool may not shadow them.
SANDBOX_RESERVED = frozenset(
    {
        "call_tool",
        "ToolError",
        "final_answer",
        "parallel",
        "report_progress",
        "print",
        "open",
        "servers",
        "tools",
        "skills",
        "show",
    }
)
SERVER_EXTRAS = ("list_resources", "read_resource", "list_prompts", "get_prompt")
"""What every server's namespace has besides its tools (its resources and prompts); a tool of the name wins."""
# JavaScript reserved words, and globals a namespace must not shadow (namespaces are globals under Deno).
JS_RESERVED = frozenset(
    """break case catch class const continue debugger default delete do else enum export extends false finally
    for function if import in instanceof new null return super switch this throw true try typeof var void while
    with yield let static implements interface package private protected public await async arguments eval
    undefined NaN Infinity console callTool ToolError reportProgress report_progress Deno globalThis Object Array
    String Number Boolean JSON Math Date Promise Error Map Set Symbol require module exports process
    fetch crypto performance navigator location self window global Buffer Intl Reflect Proxy RegExp Function
    BigInt WeakMap WeakSet ArrayBuffer Uint8Array URL URLSearchParams TextEncoder TextDecoder Request Response
    Headers Blob FormData WebSocket AbortController Event EventTarget atob btoa structuredClone queueMicrotask
    setTimeout setInterval clearTimeout clearInterval setImmediate addEventListener postMessage""".split()
)
# Names the Python stub module uses itself (its imports, the ``_call`` its functions call, the down-server helpers).
STUB_MODULE_NAMES = frozenset(
    {"Any", "Literal", "NotRequired", "TypedDict", "annotations", "_call", "_Unavailable", "_tool_error", "_namespace"}
)
# A server's namespace is a top-level name in Python and JavaScript alike.
SERVER_RESERVED = (
    frozenset(keyword.kwlist)
    | frozenset(keyword.softkwlist)
    | frozenset(dir(builtins))
    | SANDBOX_RESERVED
    | JS_RESERVED
    | STUB_MODULE_NAMES
)
# Tools and parameters are attributes and keyword arguments: only hard keywords are off limits.
MEMBER_RESERVED = frozenset(keyword.kwlist)
# A parameter is also a local of its stub, whose body calls ``_call``.
PARAM_RESERVED = MEMBER_RESERVED | {"_call"}
# A generated TypedDict is a top-level name of the stub module; the keywords among ``pascal``'s results.
PY_TYPE_RESERVED = frozenset({"None", "True", "False"}) | STUB_MODULE_NAMES
# A generated interface is a global type: it must not merge with (or shadow) one of the language or the runtime.
TS_TYPE_RESERVED = JS_RESERVED | frozenset(
    """Record Partial Required Readonly Pick Omit Exclude Extract NonNullable Parameters ConstructorParameters
    ReturnType InstanceType ThisParameterType OmitThisParameter ThisType Awaited Uppercase Lowercase Capitalize
    Uncapitalize NoInfer PromiseLike ArrayLike ReadonlyArray ReadonlyMap ReadonlySet Iterable Iterator
    IterableIterator IteratorResult AsyncIterable AsyncIterator AsyncIterableIterator Generator AsyncGenerator
    PropertyKey PropertyDescriptor TemplateStringsArray TypedPropertyDescriptor WeakRef
    FinalizationRegistry Atomics SharedArrayBuffer DataView Int8Array Uint8ClampedArray Int16Array Uint16Array
    Int32Array Uint32Array Float32Array Float64Array BigInt64Array BigUint64Array EvalError RangeError
    ReferenceError SyntaxError TypeError URIError AggregateError ErrorOptions ArrayBufferLike
    Event CustomEvent ErrorEvent MessageEvent ProgressEvent CloseEvent EventListener EventInit File FileReader
    ReadableStream WritableStream TransformStream RequestInit ResponseInit HeadersInit BodyInit Body Cache
    CacheStorage Crypto CryptoKey SubtleCrypto Performance Navigator Location Storage Window Worker
    MessageChannel MessagePort BroadcastChannel DOMException Lock Notification Permissions Image Node
    Element Document Text Comment Range Selection Screen Timer Temporal WebAssembly""".split()
)


def identifier(name: str) -> str:
    """``name`` as a Python/JS identifier: other characters become ``_``, a leading digit gets ``_``."""
    ident = re.sub(r"\W", "_", name.strip(), flags=re.ASCII)
    ident = re.sub(r"_+", "_", ident) if ident.strip("_") else ident
    if not ident:
        ident = "_"
    if ident[0].isdigit():
        ident = "_" + ident
    return ident


def safe_identifier(name: str, reserved: frozenset[str]) -> str:
    """Like ``identifier``, with a trailing ``_`` when the result is in ``reserved``."""
    ident = identifier(name)
    return ident + "_" if ident in reserved else ident


def assign_identifiers(names: Iterable[str], reserved: frozenset[str]) -> dict[str, str]:
    """Map each original name to a unique identifier.

    Collisions are resolved deterministically: names are taken in sorted order, the first keeps
    the plain identifier and later ones get ``_2``, ``_3`` … whatever order they arrived in.
    No result starts with ``__`` unless it is only underscores: Python mangles ``__x`` in a class body.
    """
    taken: set[str] = set()
    out: dict[str, str] = {}
    for name in sorted(set(names)):
        base = safe_identifier(name, reserved)
        stem = base if base.strip("_") else ""
        candidate, n = base, 2
        while candidate in taken or candidate in reserved:
            candidate = f"{stem}_{n}"
            n += 1
        taken.add(candidate)
        out[name] = candidate
    return out


def pascal(name: str) -> str:
    """``read_text_file`` → ``ReadTextFile``; used for generated type names."""
    parts = [p for p in re.split(r"[^0-9A-Za-z]+", name) if p]
    out = "".join(p[:1].upper() + p[1:] for p in parts) or "T"
    return "_" + out if out[0].isdigit() else out


def singular(hint: str) -> str:
    """``entities`` → ``entity``, ``points`` → ``point``: the name of an array's item type."""
    if hint.endswith("ies"):
        return hint[:-3] + "y"
    if hint.endswith("s") and not hint.endswith("ss"):
        return hint[:-1]
    return hint + "_item"
