"""Agent Skills folders: what export writes, and the folders import refuses (nothing runs, no server)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from mcp_code_mode.skills import SkillStore, SkillVersion, ToolRef
from mcp_code_mode.skills.folders import export_skill, parse_front_matter, read_all

SKILL = SkillVersion(
    name="count_files",
    version=3,
    language="python",
    description='Count files: "quoted" and more.',
    code="def count_files(path: str) -> int:\n    return len(fs.list(path=path))\n",
    parameters={"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    tools=(ToolRef("filesystem", "list_directory", "abc123"),),
)


def folder(root: Path, name: str, front: str, **files: str) -> Path:
    path = root / name
    path.mkdir()
    (path / "SKILL.md").write_text(f"---\n{front}\n---\n\nbody\n", encoding="utf-8")
    for file, text in files.items():
        (path / file.replace("_", ".")).write_text(text, encoding="utf-8")
    return path


def test_an_exported_folder_reads_back_as_the_same_skill(tmp_path: Path) -> None:
    exported = export_skill(SKILL, tmp_path)
    front = parse_front_matter((exported / "SKILL.md").read_text(encoding="utf-8"))
    assert front["name"] == "count-files" and front["description"] == SKILL.description
    assert json.loads((exported / "parameters.json").read_text(encoding="utf-8")) == SKILL.parameters
    [entry] = read_all(tmp_path)
    assert entry.refused is None and entry.skill is not None
    back = entry.skill
    assert (back.name, back.language, back.code, back.description) == (
        SKILL.name,
        "python",
        SKILL.code,
        SKILL.description,
    )
    assert back.parameters == {**SKILL.parameters} and back.tools == SKILL.tools


def test_a_folder_from_another_client_needs_only_name_description_and_code(tmp_path: Path) -> None:
    folder(
        tmp_path,
        "word-count",
        "name: word-count\ndescription: >\n  Count the words\n  of a text.",
        skill_ts="export default async function ({ text }: { text: string }) { return text.split(' ').length; }",
    )
    [entry] = read_all(tmp_path)
    assert entry.skill is not None, entry.refused
    assert entry.skill.name == "word_count" and entry.skill.language == "typescript"
    assert entry.skill.description == "Count the words of a text."
    assert entry.skill.parameters["required"] == ["text"]


def test_import_refuses_path_tricks_symlinks_and_bad_names_each_with_its_reason(tmp_path: Path) -> None:
    outside = tmp_path / "secret.py"
    outside.write_text("def secret() -> str:\n    return 'x'\n", encoding="utf-8")
    root = tmp_path / "incoming"
    root.mkdir()
    folder(root, "a_escape", "name: escape\ndescription: d\nmetadata:\n  code: ../../secret.py")
    linked = folder(root, "b_linked", "name: linked\ndescription: d")
    os.symlink(outside, linked / "skill.py")
    os.symlink(linked, root / "c_folder_link")
    folder(root, "d_badname", "name: 'os.system'\ndescription: d", skill_py="x = 1\n")
    folder(root, "e_nodesc", "name: nodesc", skill_py="x = 1\n")
    folder(
        root, "f_badschema", "name: badschema\ndescription: d", skill_py="x = 1\n", parameters_json='{"type": "array"}'
    )
    folder(root, "g_noparse", "name: noparse\ndescription: d", skill_py="def (:\n", parameters_json="{}")
    outcome = {e.folder: e.refused for e in read_all(root)}
    assert outcome["g_noparse"] is not None and "does not parse" in outcome["g_noparse"]
    assert outcome["a_escape"] is not None and "directly inside the skill's folder" in outcome["a_escape"]
    assert outcome["b_linked"] is not None and "symlinks are refused" in outcome["b_linked"]
    assert outcome["c_folder_link"] is not None and "symlink" in outcome["c_folder_link"]
    assert outcome["d_badname"] is not None and "identifier" in outcome["d_badname"]
    assert outcome["e_nodesc"] == "SKILL.md has no description"
    assert outcome["f_badschema"] is not None and '"type" must be "object"' in outcome["f_badschema"]


def test_saving_a_name_again_adds_a_version_and_delete_removes_them_all(tmp_path: Path) -> None:
    store = SkillStore(tmp_path / "scripts.db")
    try:
        assert store.save(SKILL, tenant="default").version == 1
        assert store.save(SKILL, tenant="default").version == 2
        assert [s.version for s in store.versions("count_files", tenant="default")] == [2, 1]
        assert [(s.name, s.version) for s in store.latest(tenant="default")] == [("count_files", 2)]
        assert store.delete("count_files", tenant="default") == 2 and store.latest(tenant="default") == []
    finally:
        store.close()


@pytest.mark.parametrize(
    ("code", "schema"),
    [
        (
            "def f(path: str, limit: int = 10, tags: list[str] | None = None, *, deep: bool = False) -> int: ...",
            {
                "path": {"type": "string"},
                "limit": {"type": "integer", "default": 10},
                "tags": {"type": ["array", "null"], "default": None},
                "deep": {"type": "boolean", "default": False},
            },
        ),
        ("def f(x, y: 'float') -> None: ...", {"x": {}, "y": {"type": "number"}}),
    ],
)
def test_python_parameters_are_read_from_the_signature(code: str, schema: dict[str, object]) -> None:
    from mcp_code_mode.skills.model import infer_python

    inferred = infer_python(code)
    assert inferred is not None and inferred["properties"] == schema


def test_typescript_parameters_are_read_from_an_object_literal_type() -> None:
    from mcp_code_mode.skills.model import infer_typescript

    code = "export default async function ({ path, n = 2 }: { path: string; n?: number; tags: Array<string> }) {}"
    assert infer_typescript(code) == {
        "type": "object",
        "properties": {
            "path": {"type": "string"},
            "n": {"type": "number"},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["path", "tags"],
    }
    assert infer_typescript("export default async function (args: Options) {}") is None  # a named type: give a schema
