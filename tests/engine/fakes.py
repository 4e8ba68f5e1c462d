"""Fakes for unit tests of the engine's stages: a runner that answers without a process, a sandbox's facts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mcp_code_mode.bridge import RunResult, ToolDispatcher
from mcp_code_mode.runners import CheckRequest, RunnerInfo, RunRequest, StubBundle
from mcp_code_mode.runners.base import Declared


@dataclass(eq=False)
class FakeRunner(Declared):
    info: RunnerInfo
    answer: RunResult = field(default_factory=lambda: RunResult(success=True, output="hi\n"))
    requests: list[RunRequest] = field(default_factory=list[RunRequest])
    isolation: str = "namespaces"

    def authorized_imports(self, package_imports: tuple[str, ...]) -> tuple[str, ...] | None:
        return ("json", *package_imports)

    async def check(self, request: CheckRequest) -> list[dict[str, Any]]:
        return []

    def identity(self) -> dict[str, str]:
        return {"fake": "1"}

    def describe(self) -> dict[str, Any]:
        return {}

    async def start(self) -> None: ...

    async def aclose(self) -> None: ...

    async def ready(self) -> None: ...

    def set_stubs(self, stubs: StubBundle) -> None: ...

    async def run(self, request: RunRequest, dispatcher: ToolDispatcher) -> RunResult:
        self.requests.append(request)
        return self.answer.model_copy(deep=True)


def info(name: str, *languages: str, packages: str = "environment", keeps_off_network: bool = False) -> RunnerInfo:
    return RunnerInfo(
        name=name,
        languages=languages or ("python",),
        stub_language="python",
        summary=f"the {name} fake",
        packages=packages,  # pyright: ignore[reportArgumentType]
        keeps_off_network=keeps_off_network,
    )


@dataclass
class FakeSandbox:
    isolation: str = "namespaces"
    reason: str = ""

    def network_enforced(self) -> bool:
        return self.isolation == "namespaces"
