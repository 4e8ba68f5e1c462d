"""Package plans for the pyodide runner: allow-list, Pyodide's own builds, pip resolution of pure wheels."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mcp_code_mode.config import Settings
from mcp_code_mode.errors import PackageError
from mcp_code_mode.packages import Whitelist
from mcp_code_mode.runners.pyodide import find_pyodide_dir
from mcp_code_mode.runners.pyodide_packages import PyodidePackages

WHITELIST = Whitelist.load()

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def lock() -> dict[str, Any]:
    return json.loads((find_pyodide_dir(Settings()) / "pyodide-lock.json").read_text(encoding="utf-8"))


async def test_pyodide_builds_need_an_index_and_load_from_it_when_one_is_set(
    lock: dict[str, Any], tmp_path: Path
) -> None:
    without = PyodidePackages(wheels_dir=tmp_path, lock=lock, index_url=None, whitelist=WHITELIST)
    with pytest.raises(PackageError, match="pandas needs Pyodide's own build"):
        await without.plan(["pandas"])
    with_index = PyodidePackages(wheels_dir=tmp_path, lock=lock, index_url=str(tmp_path), whitelist=WHITELIST)
    plan = await with_index.plan(["NumPy", "pandas"])
    assert plan.pyodide == ("numpy", "pandas") and plan.wheels == ()


async def test_a_package_off_the_allow_list_is_refused_by_name(lock: dict[str, Any], tmp_path: Path) -> None:
    packages = PyodidePackages(wheels_dir=tmp_path, lock=lock, index_url=None, whitelist=WHITELIST)
    with pytest.raises(PackageError, match="requests-oauthlib is not in the allowed packages"):
        await packages.plan(["requests_oauthlib>=1"])


async def test_a_requirement_with_no_pure_python_wheel_is_named_in_the_error(
    lock: dict[str, Any], tmp_path: Path
) -> None:
    packages = PyodidePackages(wheels_dir=tmp_path, lock=lock, index_url=None, whitelist=WHITELIST)
    with pytest.raises(PackageError, match=r"attrs==0\.0\.0\.1 has no pure-Python wheel for Pyodide's Python 3\.\d+"):
        await packages.plan(["attrs==0.0.0.1"])
    assert list(tmp_path.glob("*.whl")) == []
