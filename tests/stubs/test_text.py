"""Stubs from any text: hostile descriptions, names and values cannot break Python or TypeScript stubs.

A downstream server is untrusted: every string in its tool list (descriptions, titles, enum, const
and default values, property, tool and server names) may be anything, and every schema may have any
shape. The Python stubs must compile and send the original names; the TypeScript declarations must
parse, with every comment closed where it was opened and every string a valid JSON string.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcp_code_mode.downstream.tools import ToolInfo
from mcp_code_mode.runners.deno import deno_env, find_deno
from mcp_code_mode.stubs import python, typescript
from mcp_code_mode.stubs.index import StubIndex

# Pieces that broke, or could break, a string literal, a docstring or a comment.
FRAGMENTS = (
    '"',
    "'",
    "\\",
    '"""',
    "'''",
    "*/",
    "/*",
    "/**",
    "\x00",
    "\ud800",
    "\udfff",
    "\n",
    "\r",
    "\r\n",
    "\u2028",
    "\u2029",
    "\t",
    "\x0b",
    "\x85",
    "\u202e",
    "`",
    "${",
    " | ",
    " & ",
    "[",
    "<",
    "\\u0000",
    "\\N{",
    "\U0001f600",
    "\ufb01",
    "__",
    "None",
    "class",
    "new",
    "_call",
    "Literal",
    "Record",
    "constructor",
)
CHARS = st.characters(exclude_categories=())  # every code point, lone surrogates included
TEXT = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(CHARS, max_size=3)), max_size=5).map("".join)
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**64), 2**64), st.floats(), TEXT
)  # floats include nan and inf
PRIMITIVES = st.sampled_from(["string", "integer", "number", "boolean", "null", "object", "array"])


@st.composite
def _object(draw: st.DrawFn, inner: st.SearchStrategy[Any]) -> dict[str, Any]:
    props = draw(st.dictionaries(TEXT, inner, max_size=4))
    junk = st.one_of(st.integers(), st.dictionaries(TEXT, st.integers(), max_size=1))
    required = draw(st.lists(st.sampled_from(sorted(props)) if props else junk, max_size=3))
    schema: dict[str, Any] = {"type": "object", "properties": props, "required": required}
    if draw(st.booleans()):
        schema["description"] = draw(TEXT)
    return schema


LEAF = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "type": st.one_of(PRIMITIVES, st.lists(st.one_of(PRIMITIVES, st.integers()), max_size=3)),
            "description": st.one_of(TEXT, st.integers()),
            "title": TEXT,
            "enum": st.lists(SCALARS, min_size=1, max_size=3),
            "const": SCALARS,
            "default": st.one_of(SCALARS, st.lists(SCALARS, max_size=2), st.dictionaries(TEXT, SCALARS, max_size=2)),
            "$ref": TEXT.map(lambda name: "#/$defs/" + name),
        },
    ),
    st.booleans(),  # boolean schemas are valid JSON Schema
)
SCHEMA = st.recursive(
    LEAF,
    lambda inner: st.one_of(
        _object(inner),
        st.fixed_dictionaries({"type": st.just("array"), "items": inner}),
        st.fixed_dictionaries({"anyOf": st.lists(inner, min_size=1, max_size=3)}),
        st.fixed_dictionaries({"allOf": st.lists(inner, min_size=1, max_size=2)}),
    ),
    max_leaves=8,
)


@st.composite
def _tool(draw: st.DrawFn, server: str, name: str) -> ToolInfo:
    schema = draw(_object(SCHEMA))
    defs = draw(st.dictionaries(TEXT, SCHEMA, max_size=2))
    if defs:
        schema["$defs"] = defs
        schema["properties"][draw(TEXT)] = {"$ref": "#/$defs/" + draw(st.sampled_from(sorted(defs)))}
    output = draw(st.one_of(st.none(), _object(SCHEMA)))
    return ToolInfo(server=server, name=name, description=draw(TEXT), input_schema=schema, output_schema=output)


@st.composite
def indexes(draw: st.DrawFn) -> StubIndex:
    servers = draw(st.dictionaries(TEXT, st.one_of(st.none(), TEXT), min_size=1, max_size=2))
    tools = [draw(_tool(server, name)) for server in servers for name in draw(st.lists(TEXT, max_size=3, unique=True))]
    return StubIndex.build(list(servers.items()), tools)


def run_python(source: str) -> tuple[dict[str, Any], list[tuple[Any, ...]]]:
    calls: list[tuple[Any, ...]] = []

    def _call(*args: Any) -> str:
        calls.append(args)
        return "ok"

    namespace: dict[str, Any] = {"_call": _call}
    exec(compile(source, "<stubs>", "exec"), namespace)
    return namespace, calls


@settings(max_examples=40, deadline=None)
@given(indexes())
def test_python_stubs_of_any_schema_compile_and_send_the_original_names(index: StubIndex) -> None:
    source = python.render_module(index)
    source.encode("utf-8")  # no lone surrogate reaches the sandbox
    namespace, calls = run_python(source)
    for spec in index.tools():
        args = {p.ident: object() for p in spec.params}
        method = getattr(namespace[spec.namespace], spec.func)
        assert method(**args) == "ok"
        assert isinstance(method.__doc__, str)
        sent = ({p.name: args[p.ident] for p in spec.required}, {p.name: args[p.ident] for p in spec.optional})
        assert calls[-1] == (spec.server, spec.name, *sent)


def _lex_typescript(source: str) -> tuple[list[str], list[str], str]:
    """The comments, the string literals and the rest of a declaration file, as TypeScript reads them.

    A comment must end at the end of its line; a string must end on the line it starts on.
    """
    comments: list[str] = []
    strings: list[str] = []
    code: list[str] = []
    i = 0
    while i < len(source):
        if source.startswith("/*", i):
            end = source.index("*/", i + 2) + 2
            assert source[end : end + 1] in ("\n", ""), f"a comment ends mid-line: {source[i : end + 20]!r}"
            comments.append(source[i:end])
            i = end
        elif source[i] == '"':
            end = i + 1
            while source[end] != '"':
                end += 2 if source[end] == "\\" else 1
            assert "\n" not in source[i:end], f"a string spans lines: {source[i:end]!r}"
            strings.append(source[i : end + 1])
            i = end + 1
        else:
            code.append(source[i])
            i += 1
    return comments, strings, "".join(code)


@settings(max_examples=40, deadline=None)
@given(indexes())
def test_typescript_declarations_of_any_schema_keep_text_inside_comments_and_json_strings(index: StubIndex) -> None:
    source = typescript.render_module(index)
    source.encode("utf-8")
    comments, strings, code = _lex_typescript(source)
    for literal in strings:
        assert isinstance(json.loads(literal), str)
    assert code.isascii() and not any(bad in code for bad in ("'", "`", "\\", "*/"))
    assert all(c.count("*/") == 1 for c in comments)


@settings(max_examples=200, deadline=None)
@given(TEXT, st.sampled_from(["", "  "]))
def test_jsdoc_of_any_text_cannot_end_early_and_keys_are_identifiers_or_json_strings(text: str, indent: str) -> None:
    block = "\n".join(typescript.jsdoc(text, indent))
    if block:
        assert block.startswith(indent + "/**") and block.endswith("*/")
        assert "*/" not in block[:-2]
        block.encode("utf-8")
    for key in (typescript.property_key(text), typescript.method_key(text)):
        assert (key == text and re.fullmatch(r"[A-Za-z_$][A-Za-z0-9_$]*", key)) or json.loads(key) == text


# One test per technique of the issue: the stub compiles, the text is readable in the stub's source
# and arrives unchanged in the docstring at run time.


def _hostile_tool(text: str) -> ToolInfo:
    schema = {
        "type": "object",
        "properties": {
            "header": {"type": "string", "description": text},
            "options": {
                "type": "object",
                "description": text,
                "properties": {"name": {"type": "string", "description": text}},
            },
        },
        "required": ["header"],
    }
    return ToolInfo(server="srv", name="send", description=text, input_schema=schema, output_schema=None)


def _compiled_stub(text: str) -> tuple[str, Any]:
    index = StubIndex.build([("srv", text)], [_hostile_tool(text)])
    source = python.render_module(index)
    source.encode("utf-8")
    namespace, calls = run_python(source)
    namespace["srv"].send("x")
    assert calls == [("srv", "send", {"header": "x"}, {"options": None})]
    return source, namespace


def test_a_description_ending_in_a_quote_compiles_and_reads_as_written() -> None:
    source, namespace = _compiled_stub('Header name, e.g. "Content-Type"')
    assert '    """Header name, e.g. "Content-Type\\""""' in source
    assert namespace["srv"].send.__doc__.startswith('Header name, e.g. "Content-Type"')
    assert namespace["SendOptions"].__doc__ == 'Header name, e.g. "Content-Type"'


def test_a_description_ending_in_a_backslash_compiles_and_reads_as_written() -> None:
    source, namespace = _compiled_stub("A Windows folder such as C:\\Users\\")
    assert '"""A Windows folder such as C:\\\\Users\\\\"""' in source
    assert namespace["SendOptions"].__doc__ == "A Windows folder such as C:\\Users\\"


def test_a_description_with_triple_quotes_next_to_a_quote_compiles_and_reads_as_written() -> None:
    text = 'Wrap it in """" or """'
    source, namespace = _compiled_stub(text)
    assert '"""Wrap it in \\"\\"\\"\\" or \\"\\"\\""""' in source
    assert namespace["SendOptions"].__doc__ == text


def test_a_description_with_a_nul_compiles_and_shows_it_escaped() -> None:
    source, namespace = _compiled_stub("before\x00after")
    assert "\x00" not in source and '"""before\\x00after"""' in source
    assert namespace["SendOptions"].__doc__ == "before\x00after"


def test_a_description_with_a_lone_surrogate_compiles_and_shows_it_escaped() -> None:
    source, namespace = _compiled_stub("half a pair: \ud83d!")
    # A class's docstring must encode as UTF-8, so it holds the escape as text.
    assert '"""half a pair: \\\\ud83d!"""' in source
    assert namespace["SendOptions"].__doc__ == "half a pair: \\ud83d!"
    declarations = typescript.render_module(StubIndex.build([("srv", None)], [_hostile_tool("half \ud83d")]))
    assert "/** half \\ud83d */" in declarations


def test_a_description_closing_a_comment_stays_inside_jsdoc_and_compiles_in_python() -> None:
    source, namespace = _compiled_stub("Globs like src/**/*.py */ end")
    assert '"""Globs like src/**/*.py */ end"""' in source
    assert namespace["SendOptions"].__doc__ == "Globs like src/**/*.py */ end"
    declarations = typescript.render_module(StubIndex.build([("srv", None)], [_hostile_tool("a */ b")]))
    assert "  /** a *\\/ b */\n  header: string;" in declarations


def test_ordinary_descriptions_keep_their_quotes_and_unicode() -> None:
    text = "Naïve “smart” quotes, 'single' and \"double\" ones, an emoji 😀 and a tab\there"
    source, namespace = _compiled_stub(text)
    assert f'"""{text}"""' in source
    assert namespace["SendOptions"].__doc__ == text


# Hostile schemas for the real TypeScript checker: every technique at once, in every place text goes.
HOSTILE = (
    'ends in "',
    "ends in \\",
    'has """ and """"',
    "NUL \x00 here",
    "lone \ud800 surrogate",
    "*/ closes",
    "/* opens",
    "CR\rLF\r\nLS\u2028PS\u2029",
    "`${template}`",
    "a | b",
    "<T>",
    "new",
    "constructor",
    "__proto__",
    "",
)


def _hostile_schema(text: str) -> dict[str, Any]:
    return {
        "type": "object",
        "description": text,
        "properties": {
            text: {"type": "string", "description": text, "default": text},
            text + "\n": {"enum": [text, "a | b", 1, -0.5, None, math.nan], "description": text},
            "new": {"const": text},
            "nested": {
                "type": "array",
                "items": {"type": "object", "properties": {text: {"$ref": "#/$defs/Record"}}, "description": text},
            },
            "union": {"anyOf": [{"enum": ["x | y", "y"]}, {"type": "object", "additionalProperties": True}]},
            "list": {"type": "array", "items": {"anyOf": [{"type": "string"}, {"type": ["object", "null"]}]}},
        },
        "required": [text],
        "$defs": {"Record": {"type": "object", "properties": {"*/": {"type": "string"}}, "description": text}},
    }


@pytest.mark.anyio
async def test_declarations_for_hostile_schemas_type_check_with_deno(tmp_path: Path) -> None:
    deno = find_deno()
    if deno is None:
        pytest.skip("deno is not installed")
    names = [*HOSTILE, "delete", "default", "Promise", "None"]
    tools = [
        ToolInfo(
            server=server,
            name=name,
            description=name,
            input_schema=_hostile_schema(name),
            output_schema={
                "type": "object",
                "properties": {"p": {"$ref": "#/$defs/Promise"}, "e": {"$ref": "#/$defs/Event"}},
                "$defs": {
                    "Promise": {"type": "object", "properties": {"then": {"type": "string"}}},
                    "Event": {"type": "object", "properties": {"type": {"type": "number"}}},
                },
            },
        )
        for server in ("srv", "*/ server \"'")
        for name in names
    ]
    index = StubIndex.build([("srv", "ends in \\"), ("*/ server \"'", 'ends in "')], tools)
    uses = [
        f"const use{n}: (...args: any[]) => Promise<any> = {spec.namespace}[{json.dumps(spec.func)}];"
        for n, spec in enumerate(index.tools())
    ]
    script = tmp_path / "check.ts"
    source = typescript.render_module(index) + "\n" + "\n".join(uses) + "\nexport {};\n"
    script.write_text(source, encoding="utf-8")
    with anyio.fail_after(120):
        done = await anyio.run_process(
            [deno, "check", "--no-config", str(script)], env=deno_env(tmp_path / "deno"), cwd=tmp_path, check=False
        )
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-4000:]


def test_names_outside_the_basic_plane_reach_the_server_unchanged() -> None:
    # json.dumps writes 😀 as two surrogate escapes, which a Python literal reads as two lone surrogates.
    schema = {"type": "object", "properties": {"😀 key": {"type": "string"}}, "required": ["😀 key"]}
    info = ToolInfo(server="srv", name="send 😀", description="", input_schema=schema, output_schema=None)
    namespace, calls = run_python(python.render_module(StubIndex.build([("srv", None)], [info])))
    getattr(namespace["srv"], StubIndex.build([("srv", None)], [info]).tools()[0].func)("x")
    assert calls == [("srv", "send 😀", {"😀 key": "x"}, {})]
