"""The local runner: LocalPythonExecutor in a killable worker, with stubs over the bridge."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from mcp_code_mode.engine import CodeMode

from ..conftest import alive, make_config

pytestmark = pytest.mark.anyio


async def test_prints_are_captured_and_the_last_expression_is_returned(engine: CodeMode) -> None:
    result = await engine.execute("print('hello', 1)\nx = [1, 2]\n{'sum': sum(x)}")
    assert result.success, result.error
    assert result.output == "hello 1\n"
    assert result.return_value == {"sum": 3}
    assert result.runner == "local" and result.language == "python"


async def test_a_trailing_statement_returns_nothing_and_final_answer_returns_early(engine: CodeMode) -> None:
    assert (await engine.execute("y = 5")).return_value is None
    result = await engine.execute("final_answer({'done': True})\nprint('not reached')")
    assert result.return_value == {"done": True}
    assert result.output == ""


async def test_values_that_are_not_json_come_back_as_their_repr(engine: CodeMode) -> None:
    result = await engine.execute("{1, 2}")
    assert result.return_value == "{1, 2}"


async def test_user_functions_and_classes_work(engine: CodeMode) -> None:
    code = (
        "def double(v):\n    return 2 * v\n\n"
        "class Box:\n    def __init__(self, v):\n        self.v = v\n\n"
        "double(Box(21).v)"
    )
    result = await engine.execute(code)
    assert result.success, result.error
    assert result.return_value == 42


async def test_errors_carry_type_message_and_the_line_in_the_users_code(engine: CodeMode) -> None:
    code = "a = 1\nb = 2\n\ndef f(x):\n    return 10 / x\n\nprint('before')\nf(0)\n"
    result = await engine.execute(code)
    assert not result.success
    assert result.error is not None
    assert result.error.type == "ZeroDivisionError"
    assert result.error.message == "division by zero"
    assert result.error.line == 5
    assert result.output == "before\n"


async def test_syntax_errors_report_line_and_column(engine: CodeMode) -> None:
    result = await engine.execute("x = 1\nif x\n    pass\n")
    assert result.error is not None
    assert result.error.type == "SyntaxError"
    assert result.error.line == 2
    assert "column" in result.error.message


async def test_forbidden_imports_are_refused(engine: CodeMode) -> None:
    result = await engine.execute("import os\nos.listdir('/')")
    assert not result.success
    assert result.error is not None and "Import of os is not allowed" in result.error.message
    assert (await engine.execute("import json, re, math, datetime, collections\njson.dumps([1])")).return_value == "[1]"


@pytest.mark.parametrize("code", ["while True:\n    pass", "import time\ntime.sleep(10**6)"])
async def test_runaway_scripts_are_killed_at_the_timeout_and_the_next_run_works(engine: CodeMode, code: str) -> None:
    started = time.monotonic()
    result = await engine.execute(code, timeout_ms=1000)
    elapsed = time.monotonic() - started
    assert not result.success
    assert result.error is not None and result.error.type == "TimeoutError"
    assert result.execution_time < 1500, f"the run took {result.execution_time} ms for a 1 s timeout"
    assert elapsed < 10, f"the call took {elapsed:.1f} s"  # a worker's start may come first (a loaded machine)
    after = await engine.execute("print('alive')")
    assert after.success and after.output == "alive\n"


async def test_output_is_capped_and_marked_truncated(engine: CodeMode) -> None:
    cap = engine.config.settings.max_output_chars
    result = await engine.execute(f"for i in range(20):\n    print('x' * {cap // 10})")
    assert result.success
    assert result.truncated
    assert len(result.output) == cap
    small = await engine.execute("print('ok')")
    assert not small.truncated


async def test_open_works_inside_the_workspace_and_files_are_listed(engine: CodeMode) -> None:
    code = (
        "with open('results.txt', 'w') as f:\n"
        "    f.write('Processing complete!\\n')\n"
        "    f.write('Total: 42\\n')\n"
        "with open('results.txt', 'r') as f:\n"
        "    print(f.read())\n"
    )
    result = await engine.execute(code)
    assert result.success, result.error
    assert result.output == "Processing complete!\nTotal: 42\n\n"
    assert [(f.path, f.size) for f in result.files] == [("results.txt", 31)]


@pytest.mark.parametrize("path", ["/etc/passwd", "../../etc/passwd", "/proc/self/environ"])
async def test_open_outside_the_workspace_is_refused(engine: CodeMode, path: str) -> None:
    result = await engine.execute(f"open({path!r}).read()")
    assert not result.success
    assert result.error is not None and result.error.type == "PermissionError"


async def test_each_run_starts_fresh_with_an_empty_workspace(engine: CodeMode) -> None:
    first = await engine.execute("secret = 'left behind'\nwith open('left.txt', 'w') as f:\n    f.write('x')")
    assert first.success
    second = await engine.execute("secret")
    assert not second.success
    third = await engine.execute("open('left.txt').read()")
    assert not third.success and third.error is not None and third.error.type == "FileNotFoundError"


async def test_code_runs_in_a_worker_process_not_in_the_server(engine: CodeMode) -> None:
    runner = engine.runners["local"]
    await engine.execute("print(1)")
    pids = {w.process.pid for w in runner.pool._live}  # type: ignore[attr-defined]
    assert pids and os.getpid() not in pids


async def test_closing_the_engine_kills_every_worker_and_removes_workspaces(tmp_path: Path) -> None:
    config = make_config({}, workspace_dir=tmp_path / "runs", pool_size=3)
    async with CodeMode(config) as cm:
        async with anyio.create_task_group() as tg:  # runs at once: the pool grows to its size
            for _ in range(3):
                tg.start_soon(cm.execute, "import time\ntime.sleep(0.3)")
        with anyio.fail_after(30):
            while cm.runners["local"].pool.warm < 3:  # type: ignore[attr-defined]
                await anyio.sleep(0.05)
        pids = [w.process.pid for w in cm.runners["local"].pool._ready]  # type: ignore[attr-defined]
    with anyio.fail_after(10):
        while any(alive(pid) for pid in pids):
            await anyio.sleep(0.05)
    runs = tmp_path / "runs"  # only process-mode workers have a workspace on the host
    assert not runs.exists() or list(runs.iterdir()) == []


async def test_a_pool_used_one_run_at_a_time_keeps_one_worker_and_grows_when_runs_overlap(tmp_path: Path) -> None:
    config = make_config({}, workspace_dir=tmp_path / "runs", pool_size=3)
    async with CodeMode(config) as cm:
        pool = cm.runners["local"].pool  # type: ignore[attr-defined]
        for i in range(6):  # one at a time, back to back: the zygote that ran comes back for the next
            assert (await cm.execute(f"print({i})", cache="off")).output == f"{i}\n"
        assert pool.spawned == 1, f"{pool.spawned} workers started for runs that never overlapped"
        started = anyio.current_time()
        async with anyio.create_task_group() as tg:
            for _ in range(3):
                tg.start_soon(cm.execute, "import time\ntime.sleep(0.5)")
        assert anyio.current_time() - started < 5
        with anyio.fail_after(30):
            while pool.warm < 3:  # from now on it keeps its size
                await anyio.sleep(0.05)


# --- constructs: each one runs right, or is refused before the script runs (issue 18) -------------------


def script(*lines: str) -> str:
    return "\n".join(lines)


WORKS = [
    (
        script(
            "def deco(f):",
            "    def g(x):",
            "        return 'wrapped:' + str(f(x))",
            "    return g",
            "@deco",
            "def h(x):",
            "    return x",
            "h(1)",
        ),
        "wrapped:1",
    ),
    (
        script(
            "def times(n):",
            "    return lambda f: lambda x: n * f(x)",
            "@times(5)",
            "def two(x):",
            "    return x",
            "two(2)",
        ),
        10,
    ),
    (
        script(
            "from dataclasses import dataclass",
            "@dataclass",
            "class P:",
            "    x: int",
            "    y: int = 2",
            "p = P(1)",
            "[p.x, p.y, p == P(1, 2)]",
        ),
        [1, 2, True],
    ),
    (
        script(
            "import functools",
            "@functools.lru_cache(maxsize=None)",
            "def fib(n):",
            "    return n if n < 2 else fib(n - 1) + fib(n - 2)",
            "fib(30)",
        ),
        832040,
    ),
    (script("class A:", "    @staticmethod", "    def s(x):", "        return x + 1", "[A.s(2), A().s(3)]"), [3, 4]),
    (
        script(
            "class A:",
            "    k = 5",
            "    @classmethod",
            "    def c(cls):",
            "        return cls.k",
            "class B(A):",
            "    k = 6",
            "[A.c(), B().c()]",
        ),
        [5, 6],
    ),
    (
        script(
            "class A:",
            "    def __init__(self):",
            "        self._v = 2",
            "    @property",
            "    def v(self):",
            "        return self._v * 2",
            "    @v.setter",
            "    def v(self, value):",
            "        self._v = value",
            "a = A()",
            "first = a.v",
            "a.v = 7",
            "[first, a.v, a._v]",
        ),
        [4, 14, 7],
    ),
    (script("def tag(c):", "    c.tag = 'tagged'", "    return c", "@tag", "class C:", "    pass", "C.tag"), "tagged"),
    (
        script(
            "class A:",
            "    def n(self):",
            "        return 'A'",
            "class B(A):",
            "    def n(self):",
            "        return 'B>' + super().n()",
            "class C(B):",
            "    def n(self):",
            "        return 'C>' + super().n()",
            "C().n()",
        ),
        "C>B>A",
    ),
    (
        script(
            "class A:",
            "    def __init__(self, x):",
            "        self.x = x",
            "class B(A):",
            "    def __init__(self):",
            "        super().__init__(3)",
            "B().x",
        ),
        3,
    ),
    ("x = 1\ndef f(a=x, *, k=5):\n    return [a, k]\nx = 2\nf()", [1, 5]),
    (
        script("def f(a, /, b, *rest, **kw):", "    return [a, b, list(rest), kw]", "f(1, 2, 3, z=4)"),
        [1, 2, [3], {"z": 4}],
    ),
    (script("f = lambda a, b=1, *c, k=5: [a, b, list(c), k]", "f(0, 2, 3, k=6)"), [0, 2, [3], 6]),
    (
        script(
            "def area():",
            "    return 'global'",
            "class A:",
            "    def area(self):",
            "        return 'method'",
            "def g():",
            "    def area():",
            "        return 'local'",
            "    return area()",
            "[area(), g(), area()]",
        ),
        ["global", "local", "global"],
    ),
    ("def log(x):\n    return 'mine'\nlog(1)", "mine"),
    (
        script(
            "def f():",
            "    try:",
            "        return 1",
            "    except Exception:",
            "        return 2",
            "out = []",
            "for i in range(3):",
            "    try:",
            "        out.append(i)",
            "        break",
            "    except Exception:",
            "        out.append('caught')",
            "[f(), out]",
        ),
        [1, [0]],
    ),
    ("a, *b, c = [1, 2, 3, 4]\n[x, y] = 'xy'\n[a, b, c, x, y]", [1, [2, 3], 4, "x", "y"]),
    ("a = [1, 2]\nd = {'k': 1}\n[[*a, 3], (*a,), {**d, 'j': 2}]", [[1, 2, 3], [1, 2], {"k": 1, "j": 2}]),
    (script("s = 'a'", "pi = 3.14159", "f'{s!r}|{s=}|{pi:6.2f}|{42:04d}|{1000:,}'"), "'a'|s='a'|  3.14|0042|1,000"),
    ("class C:\n    a = 1\n    b = a + 1\n[C.a, C.b]", [1, 2]),
    ("list((i, j) for i in range(2) for j in range(i + 1))", [[0, 0], [1, 0], [1, 1]]),
]

WORKS_IDS = [
    "decorator",
    "decorator_factory",
    "dataclass",
    "lru_cache",
    "staticmethod",
    "classmethod",
    "property_and_setter",
    "class_decorator",
    "zero_argument_super",
    "super_init",
    "defaults_at_definition",
    "positional_only_and_star_args",
    "lambda_signature",
    "methods_and_nested_defs_stay_in_their_scope",
    "a_def_shadows_a_builtin_tool",
    "return_and_break_pass_through_except",
    "starred_targets",
    "starred_displays",
    "fstring_conversions_and_specs",
    "class_body_names",
    "nested_generator_expression",
]


@pytest.mark.parametrize(("code", "expected"), WORKS, ids=WORKS_IDS)
async def test_a_construct_the_interpreter_supports_gives_cpythons_answer(
    engine: CodeMode, code: str, expected: object
) -> None:
    result = await engine.execute(code)
    assert result.success, result.error
    assert result.return_value == expected


async def test_print_honours_sep_and_end(engine: CodeMode) -> None:
    result = await engine.execute("print('a', 'b', sep='-', end='|')\nprint('c')")
    assert result.success, result.error
    assert result.output == "a-b|c\n"


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("def f(a):\n    return a\nf(1, 2)", "too many positional arguments"),
        ("def f(a):\n    return a\nf(1, b=2)", "unexpected keyword argument 'b'"),
        ("count = 1\nprint(count)\ncoutn", "name 'coutn' is not defined"),
    ],
    ids=["extra_argument", "unknown_keyword", "misspelt_name"],
)
async def test_a_wrong_call_or_name_is_an_error_not_a_guess(engine: CodeMode, code: str, expected: str) -> None:
    result = await engine.execute(code)
    assert not result.success and result.error is not None
    assert expected in result.error.message and result.error.line == 3


REFUSED = [
    ("x = 2\nmatch x:\n    case 2:\n        r = 'two'\nr", "`match`", 2),
    ("if (n := 3) > 2:\n    pass\nn", "`:=`", 1),
    (
        script(
            "def outer():",
            "    c = 0",
            "    def inc():",
            "        nonlocal c",
            "        c += 1",
            "    inc()",
            "    return c",
            "outer()",
        ),
        "`nonlocal`",
        4,
    ),
    ("g = 1\ndef setg():\n    global g\n    g = 5\nsetg()\ng", "`global`", 3),
    (script("def gen(n):", "    for i in range(n):", "        yield i", "list(gen(3))"), "`yield`", 3),
    ("def gen():\n    yield from [1, 2]\nlist(gen())", "`yield from`", 2),
    ("async def f():\n    return 1\nf()", "`async def`", 1),
    ("r = 'no'\nfor i in []:\n    pass\nelse:\n    r = 'else'\nr", "`for` loop", 2),
    ("r = 'no'\nwhile False:\n    pass\nelse:\n    r = 'else'\nr", "`while` loop", 2),
    (
        script(
            "class C:",
            "    def __enter__(self):",
            "        return (1, 2)",
            "    def __exit__(self, *a):",
            "        return False",
            "with C() as (x, y):",
            "    pass",
        ),
        "`with ... as`",
        6,
    ),
    (script("try:", "    raise ValueError('v')", "except ValueError:", "    raise"), "bare `raise`", 4),
    ("class M(type):\n    pass\nclass A(metaclass=M):\n    pass", "`metaclass=`", 3),
    (script("class A:", "    x = 1", "    for i in range(2):", "        x += i"), "`For` statement in a class body", 3),
    ("class C:\n    pass\nc = C()\nc.x = 1\ndel c.x", "`del` of an attribute", 5),
]


@pytest.mark.parametrize(("code", "construct", "line"), REFUSED, ids=[r[1] for r in REFUSED])
async def test_an_unsupported_construct_is_refused_before_anything_runs(
    engine: CodeMode, code: str, construct: str, line: int
) -> None:
    prelude = "print('ran')\nopen('side-effect.txt', 'w').write('x')\n"
    result = await engine.execute(prelude + code)
    assert not result.success and result.error is not None
    assert result.error.type == "UnsupportedSyntax"
    assert construct in result.error.message and 'runner="cpython"' in result.error.message
    assert result.error.line == line + 2
    assert result.output == "" and result.files == []


async def test_a_return_outside_a_function_is_the_compilers_syntax_error(engine: CodeMode) -> None:
    result = await engine.execute("print('ran')\nreturn 1")
    assert result.error is not None and result.error.type == "SyntaxError" and result.error.line == 2
    assert result.output == ""


def test_the_interpreter_is_imported_without_jinja2_and_leaves_no_placeholder() -> None:
    """smolagents' utils import jinja2 for exporting agents only: the zygote imports the interpreter without it,
    and the placeholder that stood in is gone, so a script allowed to import jinja2 would get the real one."""
    sandboxed = Path(__file__).resolve().parents[2] / "src" / "mcp_code_mode" / "runners" / "sandboxed"
    script = (
        f"import sys; sys.path.insert(0, {str(sandboxed)!r})\n"
        "import cm_interpreters\n"
        "cm_interpreters.import_interpreter()\n"
        "from smolagents.local_python_executor import LocalPythonExecutor\n"
        "assert 'jinja2' not in sys.modules, sys.modules.get('jinja2')\n"
        "import jinja2\n"
        "print(hasattr(jinja2, 'Template'))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "True"
