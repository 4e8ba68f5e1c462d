"""The layout holds: no import cycles between the package's modules, no runner named outside ``runners/``, and the
MCP SDK and the search machinery imported only by what needs them."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import mcp_code_mode
from mcp_code_mode.runners.registry import names

PACKAGE = Path(mcp_code_mode.__file__).resolve().parent
SANDBOX_SIDE = PACKAGE / "runners" / "sandboxed"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _host_modules() -> dict[str, Path]:
    """Every host-side module (the sandbox-side programs are never imported by the server)."""
    out: dict[str, Path] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if SANDBOX_SIDE in path.parents or path.name == "pyodide_prelude.py":
            continue
        out[_module_name(path)] = path
    return out


def _type_checking_only(node: ast.If) -> bool:
    return isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """Modules of this package that ``name`` imports anywhere (a function's lazy import counts; an import only
    for type checkers does not)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _type_checking_only(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return {m for m in found if m in known and m != name}


def _graph() -> dict[str, set[str]]:
    modules = _host_modules()
    known = set(modules)
    graph = {name: _imports(name, path, known) for name, path in modules.items()}
    # A package's __init__ re-exports its modules: importing a module of it is not depending on the package.
    return {
        name: {d for d in deps if not (name.startswith(d + ".") and (PACKAGE.parent / d.replace(".", "/")).is_dir())}
        for name, deps in graph.items()
    }


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def connect(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component: list[str] = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return out


def test_the_finder_sees_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_imports_one_that_imports_it_back() -> None:
    graph = _graph()
    assert graph, "no modules found"
    assert _cycles(graph) == []


def test_subpackages_do_not_depend_on_each_other_in_a_circle() -> None:
    """Between subpackages (``runners``, ``sandbox``, ``stubs``, ``cache``, ...) the dependencies form no cycle."""
    graph = _graph()

    def top(module: str) -> str:
        parts = module.split(".")
        return ".".join(parts[:2])

    packages: dict[str, set[str]] = {}
    for name, deps in graph.items():
        packages.setdefault(top(name), set()).update(top(d) for d in deps if top(d) != top(name))
    # the root package's __init__ re-exports the API, and every module may import the leaf modules of the root
    packages.pop("mcp_code_mode", None)
    for deps in packages.values():
        deps.discard("mcp_code_mode")
    assert _cycles(packages) == []


def _string_literals(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


@pytest.mark.parametrize("runner", names())
def test_no_code_outside_runners_names_a_runner(runner: str) -> None:
    """Nothing outside ``runners/`` compares against, looks up or hard-codes a runner's name: it asks the plug-in."""
    found = [
        f"{path.relative_to(PACKAGE)}:{line}"
        for name, path in _host_modules().items()
        if not name.startswith("mcp_code_mode.runners")
        for line, value in _string_literals(path)
        if value == runner
    ]
    assert found == []


def test_serving_imports_no_search_machinery_until_a_search() -> None:
    """numpy and the embedding model's tokenizer are imported by the first search, not by a server that starts,
    builds its engine and stores a run (it stores without a vector until then)."""
    script = (
        "import asyncio, json, os, sys, tempfile\n"
        "import mcp_code_mode.cli, mcp_code_mode.server\n"
        "from mcp_code_mode.engine import CodeMode\n"
        "from mcp_code_mode.config import CodeModeConfig, Settings\n"
        "d = tempfile.mkdtemp()\n"
        "settings = Settings(cache_dir=d, eager_runners='none', cache_embedder='wordllama', pyodide_pool_size=0)\n"
        "cm = CodeMode(CodeModeConfig.from_servers({}, settings=settings, env=dict(os.environ)))\n"
        "async def main():\n"
        "    async with cm:\n"
        "        before = [m for m in ('numpy', 'tokenizers') if m in sys.modules]\n"
        "        await asyncio.to_thread(cm.scripts.search, 'print a number', None, 3, tenant='default')\n"
        "        after = [m for m in ('numpy', 'tokenizers') if m in sys.modules]\n"
        "        print(json.dumps([before, after]))\n"
        "asyncio.run(main())\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    before, after = json.loads(done.stdout.strip().splitlines()[-1])
    assert before == [], f"imported before any search: {before}"
    assert after == ["numpy", "tokenizers"]


@pytest.mark.parametrize(
    "module",
    [
        "mcp_code_mode",
        "mcp_code_mode.cli",
        "mcp_code_mode.config",
        "mcp_code_mode.sandbox",
        "mcp_code_mode.runners._early",
    ],
)
def test_the_cli_and_the_settings_import_no_mcp_sdk(module: str) -> None:
    """The MCP SDK (about 0.5 s of imports) is imported by what serves or runs, not by the CLI's start, the
    settings, the sandbox or the default runner's early start: `serve` probes the sandbox and starts that
    runner's first worker before it imports the SDK, and `tokens`, `cache`, `audit` and `skills` never wait
    for it. The package's engine names are still there on first use."""
    script = (
        f"import sys, {module}\n"
        "print(sorted(m for m in ('mcp', 'mcp_types', 'mcp_code_mode.engine') if m in sys.modules))\n"
        "from mcp_code_mode import CodeMode, RunResult\n"
        "print(CodeMode.__name__, RunResult.__name__, 'mcp' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == ["[]", "CodeMode RunResult True"]


def test_building_the_server_imports_no_rich_and_keeps_the_logging_serve_set_up() -> None:
    """The SDK's ``MCPServer`` imports ``rich`` for a log handler that ``logging.basicConfig`` drops when logging
    is configured already (as ``serve`` does): building the server imports no ``rich`` and keeps the handlers it
    found; a program that configured none gets one plain handler on stderr, not a ``RichHandler``."""
    script = (
        "import json, logging, os, sys\n"
        "configured = sys.argv[1] == 'configured'\n"
        "if configured:\n"
        "    logging.basicConfig(level=logging.WARNING, format='%(name)s %(message)s')\n"
        "mine = list(logging.getLogger().handlers)\n"
        "from mcp_code_mode.server import build_server\n"
        "from mcp_code_mode.engine import CodeMode\n"
        "from mcp_code_mode.config import CodeModeConfig, Settings\n"
        "settings = Settings(eager_runners='none', pyodide_pool_size=0)\n"
        "build_server(CodeMode(CodeModeConfig.from_servers({}, settings=settings, env=dict(os.environ))))\n"
        "handlers = logging.getLogger().handlers\n"
        "print(json.dumps(['rich' in sys.modules, handlers == mine, [type(h).__name__ for h in handlers]]))\n"
    )
    cases = {"configured": [False, True, ["StreamHandler"]], "bare": [False, False, ["StreamHandler"]]}
    for mode, expected in cases.items():
        done = subprocess.run(
            [sys.executable, "-c", script, mode], capture_output=True, text=True, timeout=120, check=False
        )
        assert done.returncode == 0, done.stderr[-2000:]
        assert json.loads(done.stdout.strip().splitlines()[-1]) == expected, mode
