"""The constructs the local runner refuses, found by reading the script (no interpreter, no worker)."""

from __future__ import annotations

import pytest

from mcp_code_mode.runners.sandboxed.cm_constructs import ADVICE, unsupported

REFUSED = [
    ("x = 2\nmatch x:\n    case 2:\n        pass\n", 2, "`match`"),
    ("if (n := 3):\n    pass\n", 1, "`:=`"),
    ("def f():\n    c = 0\n    def g():\n        nonlocal c\n", 4, "`nonlocal`"),
    ("g = 1\ndef f():\n    global g\n", 3, "`global`"),
    ("def f():\n    yield 1\n", 2, "`yield`"),
    ("def f():\n    yield from [1]\n", 2, "`yield from`"),
    ("async def f():\n    pass\n", 1, "`async def`"),
    ("for i in []:\n    pass\nelse:\n    pass\n", 1, "`for` loop"),
    ("while False:\n    pass\nelse:\n    pass\n", 1, "`while` loop"),
    ("with f() as (a, b):\n    pass\n", 1, "`with ... as`"),
    ("try:\n    pass\nexcept ValueError:\n    raise\n", 4, "bare `raise`"),
    ("class A(metaclass=M):\n    pass\n", 1, "`metaclass=`"),
    ("class A:\n    x = 1\n    if x:\n        y = 2\n", 3, "`If` statement in a class body"),
    ("del a.b\n", 1, "`del` of an attribute"),
]


@pytest.mark.parametrize(("code", "line", "construct"), REFUSED, ids=[r[2] for r in REFUSED])
def test_each_unsupported_construct_is_found_with_its_line(code: str, line: int, construct: str) -> None:
    findings = unsupported(code)
    assert [n for n, _ in findings] == [line]
    assert construct in findings[0][1] and "not supported by the local runner" in findings[0][1]


def test_every_finding_is_listed_in_line_order() -> None:
    code = "x = 1\nwhile x:\n    if (y := x):\n        break\nelse:\n    pass\ndef f():\n    yield x\n"
    assert [n for n, _ in unsupported(code)] == [2, 3, 8]


@pytest.mark.parametrize(
    "code",
    [
        "@functools.lru_cache\ndef f(a, /, b=1, *c, k=2, **d):\n    return super().f()\n",
        "@dataclass\nclass P:\n    x: int\n    y = x\n    def m(self):\n        pass\n",
        "a, *b = [1, 2]\nprint(f'{a!r}', [*b], {**{}}, end='')\nlambda q=1: q\n",
        "try:\n    pass\nexcept ValueError as e:\n    raise e\n",
    ],
    ids=["decorators_and_signatures", "class_body", "starred_and_conversions", "raise_e"],
)
def test_what_the_runner_makes_work_is_not_refused(code: str) -> None:
    assert unsupported(code) == []


def test_a_script_that_does_not_parse_has_no_findings() -> None:
    assert unsupported("match x:\n  case") == []


def test_the_advice_names_the_cpython_runner() -> None:
    assert 'runner="cpython"' in ADVICE
