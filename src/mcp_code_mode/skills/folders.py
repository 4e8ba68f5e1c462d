"""Skills as Agent Skills folders: ``DIR/<name>/SKILL.md`` (YAML front matter ``name`` and ``description``,
then how to call it), the code beside it (``skill.py``, ``skill.ts`` or ``skill.js``) and ``parameters.json``.

The front matter's ``name`` is the skill's name with ``-`` for ``_`` (the format's names are lowercase words
joined by hyphens); ``metadata`` keeps what this server needs to restore it exactly: the name, the language,
the code's file and the tools with their schema hashes. Import reads only plain files inside each folder: a
symlink, or a ``SKILL.md`` that names a file outside its folder, refuses that skill.
"""

from __future__ import annotations

import ast
import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .model import SkillError, SkillVersion, ToolRef, check_language, check_name, check_parameters, infer

CODE_FILES = {"python": "skill.py", "typescript": "skill.ts", "javascript": "skill.js"}
LANGUAGE_OF = {".py": "python", ".ts": "typescript", ".js": "javascript", ".mjs": "javascript"}
MAX_FILE_BYTES = 200_000


def export_skill(skill: SkillVersion, root: Path) -> Path:
    """Write one skill's folder under ``root``; its path."""
    folder = root / skill.name
    folder.mkdir(parents=True, exist_ok=True)
    code_file = CODE_FILES[skill.language]
    (folder / code_file).write_text(skill.code, encoding="utf-8")
    (folder / "parameters.json").write_text(json.dumps(skill.parameters, indent=2) + "\n", encoding="utf-8")
    tools = ",".join(f"{t.server}.{t.tool}@{t.schema_hash}" for t in skill.tools)
    lines = [
        "---",
        f"name: {skill.name.lower().replace('_', '-')}",
        f"description: {json.dumps(skill.description)}",
        "metadata:",
        f"  code-mode-name: {skill.name}",
        f"  language: {skill.language}",
        f"  code: {code_file}",
        f"  version: {skill.version}",
        f"  tools: {json.dumps(tools)}",
        "---",
        "",
        f"# {skill.name}",
        "",
        skill.description,
        "",
        "A code-mode skill (mcp-code-mode): inside `execute_code`, "
        + (
            f"a Python run calls `skills.{skill.name}(...)`."
            if skill.language == "python"
            else f"a JavaScript or TypeScript run calls `await skills.{skill.name}({{...}})`."
        ),
        "",
        "Parameters (`parameters.json` is the JSON Schema):",
        "",
        *_parameter_lines(skill.parameters),
        "",
        f"The code is in [{code_file}]({code_file})"
        + (f"; it calls {', '.join(f'`{t.server}.{t.tool}`' for t in skill.tools)}." if skill.tools else "."),
        "",
    ]
    (folder / "SKILL.md").write_text("\n".join(lines), encoding="utf-8")
    return folder


def _parameter_lines(schema: Any) -> list[str]:
    props = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    if not props:
        return ["- none"]
    out: list[str] = []
    for name, sub in props.items():
        kind = sub.get("type", "any") if isinstance(sub, dict) else "any"
        kind = " or ".join(kind) if isinstance(kind, list) else str(kind)
        extra = "required" if name in required else "optional"
        if isinstance(sub, dict) and "default" in sub:
            extra += f", default {json.dumps(sub['default'])}"
        out.append(f"- `{name}` ({kind}, {extra})")
    return out


@dataclass(frozen=True)
class Imported:
    folder: str
    skill: SkillVersion | None = None
    refused: str | None = None


def read_folder(folder: Path) -> SkillVersion:
    """A skill from one folder (``SkillError`` saying why not)."""
    if folder.is_symlink() or not folder.is_dir():
        raise SkillError("not a folder (a symlink is refused)")
    front = parse_front_matter(_read_plain(folder, "SKILL.md"))
    meta: dict[str, str] = front.get("metadata") if isinstance(front.get("metadata"), dict) else {}  # pyright: ignore[reportAssignmentType]
    name = check_name(meta.get("code-mode-name") or str(front.get("name") or "").replace("-", "_"))
    description = str(front.get("description") or "").strip()
    if not description:
        raise SkillError("SKILL.md has no description")
    code_file = meta.get("code") or next((f for f in CODE_FILES.values() if (folder / f).exists()), "")
    if not code_file:
        raise SkillError(f"no code beside SKILL.md ({', '.join(CODE_FILES.values())})")
    language = check_language(meta.get("language") or LANGUAGE_OF.get(Path(code_file).suffix, ""))
    code = _read_plain(folder, code_file)
    schema: Any
    if (folder / "parameters.json").exists() or (folder / "parameters.json").is_symlink():
        try:
            schema = json.loads(_read_plain(folder, "parameters.json"))
        except ValueError as exc:
            raise SkillError(f"parameters.json is not JSON: {exc}") from None
    else:
        try:
            schema = infer(language, code)
        except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
            raise SkillError(f"{code_file} does not parse: {exc}") from None
        if schema is None:
            raise SkillError("no parameters.json, and the code's parameters cannot be read")
    parameters = check_parameters(schema, language)
    if language == "python":
        try:
            ast.parse(code, code_file)  # parsed, never run
        except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
            raise SkillError(f"{code_file} does not parse: {exc}") from None
    tools: list[ToolRef] = []
    for entry in (meta.get("tools") or "").split(","):
        match = re.fullmatch(r"\s*([^.@\s]+)\.([^@\s]+)@(\w*)\s*", entry)
        if match:
            tools.append(ToolRef(match.group(1), match.group(2), match.group(3)))
    return SkillVersion(
        name=name, version=0, language=language, description=description, code=code, parameters=parameters,
        tools=tuple(tools),
    )  # fmt: skip


def _read_plain(folder: Path, name: str) -> str:
    """A regular file directly inside ``folder``, never through a symlink or out of the folder."""
    if not name or "/" in name or "\\" in name or name in (".", "..") or "\0" in name:
        raise SkillError(f"{name!r}: only a file directly inside the skill's folder can be named")
    path = folder / name
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        raise SkillError(f"{name} is missing") from None
    if not stat.S_ISREG(info.st_mode):
        raise SkillError(f"{name} is not a regular file (symlinks are refused)")
    if info.st_size > MAX_FILE_BYTES:
        raise SkillError(f"{name} is larger than {MAX_FILE_BYTES:,} bytes")
    if path.resolve().parent != folder.resolve():
        raise SkillError(f"{name} is outside the skill's folder")
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, encoding="utf-8") as handle:
        return handle.read()


def read_all(root: Path) -> list[Imported]:
    """Every skill folder under ``root`` (or ``root`` itself when it holds a ``SKILL.md``), each read or refused."""
    folders = (
        [root] if (root / "SKILL.md").exists() else sorted(p for p in root.iterdir() if p.is_dir() or p.is_symlink())
    )
    out: list[Imported] = []
    for folder in folders:
        try:
            out.append(Imported(folder.name, skill=read_folder(folder)))
        except (SkillError, OSError, UnicodeDecodeError) as exc:
            out.append(Imported(folder.name, refused=str(exc)))
    return out


def parse_front_matter(text: str) -> dict[str, Any]:
    """The YAML front matter of a ``SKILL.md``: top-level ``key: value`` scalars (plain, quoted or ``>``/``|``
    blocks) and one level of mapping (``metadata``). Enough for the format; anything else is ignored."""
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        raise SkillError("SKILL.md does not start with YAML front matter (---)")
    try:
        end = next(i for i in range(1, len(lines)) if lines[i].strip() == "---")
    except StopIteration:
        raise SkillError("SKILL.md's front matter has no closing ---") from None
    body = lines[1:end]
    out: dict[str, Any] = {}
    i = 0
    while i < len(body):
        line = body[i]
        match = re.match(r"^([A-Za-z0-9_-]+):\s*(.*)$", line)
        i += 1
        if not match:
            continue
        key, value = match.group(1), match.group(2).strip()
        nested = []
        while i < len(body) and (body[i].startswith((" ", "\t")) or not body[i].strip()):
            nested.append(body[i])
            i += 1
        if value in ("", ">", "|", ">-", "|-"):
            pairs = [re.match(r"^\s+([A-Za-z0-9_-]+):\s*(.*)$", n) for n in nested if n.strip()]
            if value == "" and nested and all(pairs):
                out[key] = {m.group(1): _scalar(m.group(2).strip()) for m in pairs if m}
            else:
                joiner = "\n" if value.startswith("|") else " "
                out[key] = joiner.join(n.strip() for n in nested if n.strip())
        else:
            out[key] = _scalar(" ".join([value, *(n.strip() for n in nested if n.strip())]))
    return out


def _scalar(value: str) -> str:
    if value.startswith('"') and value.endswith('"') and len(value) >= 2:
        try:
            return str(json.loads(value))
        except ValueError:
            return value[1:-1]
    if value.startswith("'") and value.endswith("'") and len(value) >= 2:
        return value[1:-1].replace("''", "'")
    return value
