"""Type-check a TypeScript script against the generated tool declarations with ``deno check``.

Type errors never stop a run (the ``deno`` runner does not check types); this is what ``validate_code``
reports instead. JavaScript is checked the same way (``checkJs``): tool names and argument objects
are checked against the declarations, untyped values are not findings. The script is checked as the
sandbox runs it: the declarations (``stubs.typescript``)
are global, bare names of allowed npm packages and Node.js built-ins resolve as in the runner, and
Node.js globals (``require``, ``process``, ``Buffer``) are typed by Deno. Packages must already be in
Deno's cache (``DenoRunner.check`` puts them there first).

``deno check`` runs in the sandbox like a run (``Sandbox.command_spec``): it sees the script, the
declarations, Deno and its cache, and nothing else of the host; memory, processes and file sizes are
limited as for a Deno worker, and it is killed after ``CHECK_TIMEOUT`` seconds.
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import anyio

from ..packages import Whitelist
from ..sandbox import Profile, Sandbox
from .npm import import_map

CHECK_TIMEOUT = 60.0
"""Seconds allowed for one ``deno check``."""
COMPILER_OPTIONS = {
    "strict": True,
    # Scripts, not libraries: untyped parameters and `catch (e) { e.message }` are not findings.
    "noImplicitAny": False,
    "useUnknownInCatchVariables": False,
}
_FINDING = re.compile(r"^(TS\d+) \[ERROR\]: (.*)$")
_LOCATION = re.compile(r"^\s+at (file://\S+?):(\d+):(\d+)$")


@dataclass(frozen=True)
class Finding:
    """One type error, located in the script (lines and columns count from 1)."""

    line: int | None
    column: int | None
    message: str
    """``TS2322: Type 'number' is not assignable to type 'string'.``"""


def parse_findings(text: str, script: Path) -> list[Finding]:
    """The type errors ``deno check`` printed that are located in ``script``."""
    findings: list[Finding] = []
    current: str | None = None
    target = script.resolve().as_uri()
    for line in text.splitlines():
        head = _FINDING.match(line)
        if head:
            current = f"{head.group(1)}: {head.group(2).strip()}"
            continue
        where = _LOCATION.match(line)
        if where and current is not None:
            if where.group(1) == target:
                findings.append(Finding(int(where.group(2)), int(where.group(3)), current))
            current = None
    return findings


async def check_typescript(
    code: str,
    declarations: str,
    *,
    deno: str,
    deno_dir: Path,
    whitelist: Whitelist,
    sandbox: Sandbox,
    javascript: bool = False,
) -> list[Finding]:
    """Type errors of ``code`` against ``declarations``; [] when it checks. Lines point into ``code``.

    Problems that are not type errors (an import that cannot be resolved, a package not in the cache)
    come back as one finding without a line.
    """
    with tempfile.TemporaryDirectory(prefix="mcp-code-mode-check-") as tmp:
        folder = Path(tmp)
        folder.chmod(0o755)  # the check runs as the sandbox's own unprivileged uid
        script = folder / ("script.js" if javascript else "script.ts")
        script.write_text(code, encoding="utf-8")
        (folder / "tools.d.ts").write_text(declarations, encoding="utf-8")
        options = {**COMPILER_OPTIONS, "types": ["./tools.d.ts"], **({"checkJs": True} if javascript else {})}
        config = {"compilerOptions": options, **import_map(whitelist)}
        (folder / "deno.json").write_text(json.dumps(config), encoding="utf-8")
        argv = [
            deno,
            "check",
            "--quiet",
            "--no-lock",
            "--cached-only",
            "--config",
            str(folder / "deno.json"),
            str(script),
        ]
        env = {"DENO_DIR": str(deno_dir), "NO_COLOR": "1", "DENO_NO_UPDATE_CHECK": "1"}
        spec = sandbox.command_spec(
            argv, Profile(network=False), reads=[deno, deno_dir, folder], env=env, limits=sandbox.limits.for_process()
        )
        try:
            with anyio.fail_after(CHECK_TIMEOUT):
                done = await anyio.run_process(
                    spec.argv, env=spec.env, cwd=spec.cwd, check=False, stdin=subprocess.DEVNULL
                )
        except TimeoutError:
            return [Finding(None, None, f"the type check took longer than {CHECK_TIMEOUT:.0f} s")]
        finally:
            sandbox.release(spec)
        if done.returncode == 0:
            return []
        text = (done.stdout + done.stderr).decode("utf-8", "replace")
        findings = parse_findings(text, script)
        if findings:
            return findings
        problem = next((line for line in text.splitlines() if line.startswith("error:")), text.strip()[:500])
        return [Finding(None, None, problem.replace(script.resolve().as_uri(), "script.ts"))]
