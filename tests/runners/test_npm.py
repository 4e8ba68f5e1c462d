"""The npm allow-list hook and what a script names: unit tests of ``runners/npm.py``."""

from __future__ import annotations

import pytest

from mcp_code_mode.errors import PackageError, UnsupportedError
from mcp_code_mode.packages import Whitelist
from mcp_code_mode.runners.npm import (
    NpmPlan,
    checker,
    import_map,
    npm_specifiers,
    parse_requirement,
    plan,
)

WHITELIST = Whitelist.load()
check_npm_packages = checker(WHITELIST)


def test_allowed_names_map_to_their_default_specifier_and_others_are_refused_by_name() -> None:
    assert check_npm_packages(["axios", "lodash", "axios"]) == {"axios": "npm:axios@1", "lodash": "npm:lodash@4"}
    with pytest.raises(PackageError, match=r"npm packages 'evil', 'left-pad' not allowed \(allowed: axios, "):
        check_npm_packages(["left-pad", "axios", "evil"])


@pytest.mark.parametrize(
    ("text", "name", "version", "subpath"),
    [
        ("axios", "axios", None, ""),
        ("axios@1.7.2", "axios", "1.7.2", ""),
        ("npm:lodash@4/fp", "lodash", "4", "fp"),
        ("@scope/pkg@2/a/b", "@scope/pkg", "2", "a/b"),
        ("npm:/date-fns@4/locale", "date-fns", "4", "locale"),
    ],
)
def test_requirements_are_parsed(text: str, name: str, version: str | None, subpath: str) -> None:
    req = parse_requirement(text)
    assert (req.name, req.version, req.subpath) == (name, version, subpath)


@pytest.mark.parametrize("text", ["", "npm:", "Upper", "@/x", "a b"])
def test_what_is_not_a_package_name_is_refused(text: str) -> None:
    with pytest.raises(UnsupportedError, match="is not an npm package name"):
        parse_requirement(text)


def test_imports_and_requires_are_found_and_builtins_and_local_modules_skipped() -> None:
    code = """
import axios from "axios";
import { chunk } from 'npm:lodash@4';
export { parse } from "yaml";
import "zod";
const dayjs = require("dayjs");
const later = await import("uuid");
import fs from "fs";
import path from "node:path";
import local from "./local.js";
import remote from "https://example.com/x.js";
const computed = await import("npm:" + name);
// text that only looks like one: from me to you
"""
    assert npm_specifiers(code) == ["axios", "npm:lodash@4", "yaml", "zod", "dayjs", "uuid"]


def test_a_plan_caches_what_is_named_and_preloads_literal_requires() -> None:
    code = "const ax = require('axios');\nconst fp = require('lodash/fp');\nimport d from 'npm:dayjs@1.11.0';"
    assert plan(code, ["zod"], check_npm_packages) == NpmPlan(
        cache=("npm:zod@4", "npm:axios@1", "npm:lodash@4", "npm:dayjs@1.11.0"),
        preload=(("axios", "npm:axios@1"), ("lodash/fp", "npm:lodash@4/fp")),
    )
    assert plan("console.log(1)", [], check_npm_packages) == NpmPlan()
    with pytest.raises(PackageError, match="'left-pad' not allowed"):
        plan("const pad = require('left-pad');", [], check_npm_packages)


def test_a_different_allow_list_can_be_plugged_in() -> None:
    def only_axios(names: object) -> dict[str, str]:
        return {"axios": "npm:axios@0.27"}

    assert plan("require('axios')", [], check=only_axios).preload == (("axios", "npm:axios@0.27"),)


def test_the_import_map_resolves_bare_names_of_allowed_packages_and_builtins() -> None:
    imports = import_map(WHITELIST)["imports"]
    assert imports["axios"] == f"npm:axios@{WHITELIST.javascript['axios']}"
    assert imports["lodash/"] == f"npm:/lodash@{WHITELIST.javascript['lodash']}/"
    assert imports["fs"] == "node:fs" and imports["fs/promises"] == "node:fs/promises"
    assert "left-pad" not in imports
