"""The host's side of a run's files: what a sandbox sends is counted as it arrives, never believed."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from mcp_code_mode.artifacts import ArtifactLimits, RunFiles
from mcp_code_mode.bridge import FileEntry, parse_run_message
from mcp_code_mode.errors import ProtocolError

MB = 1 << 20
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)


def files(tmp_path: Path, **limits: int) -> RunFiles:
    return RunFiles(tmp_path / "staging", ArtifactLimits(**limits))


def test_a_file_sent_past_the_per_file_cap_is_dropped_as_it_arrives_and_nothing_of_it_stays_on_disk(
    tmp_path: Path,
) -> None:
    run = files(tmp_path, max_file=1 * MB)
    chunk = b"x" * (256 << 10)
    for _ in range(8):  # a sandbox that ignores the cap it was told: 2 MB in 256 KB chunks
        run.write("big.bin", chunk, end=False)
    run.write("big.bin", b"", end=True)
    run.write("small.txt", b"ok", end=True)
    entries = run.entries([FileEntry("big.bin", 10), FileEntry("small.txt", 2)])  # sizes the sandbox claimed
    assert [(e.path, e.size, e.dropped) for e, _ in entries] == [
        ("big.bin", 10, "CODE_MODE_ARTIFACT_MAX_FILE_MB"),
        ("small.txt", 2, None),
    ]
    assert sorted(p.name for p in (tmp_path / "staging").iterdir()) == ["2"]  # a name the host chose


def test_the_per_run_cap_counts_bytes_received_and_the_file_count_cap_refuses_the_rest(tmp_path: Path) -> None:
    run = files(tmp_path, max_file=MB, max_run=MB + 10, max_files=2)
    run.write("a", b"x" * MB, end=True)
    run.write("b", b"x" * 20, end=True)  # past the run's bytes
    run.write("c", b"x", end=True)
    run.write("d", b"x", end=True)  # past the count
    reasons = {e.path: e.dropped for e, _ in run.entries([])}
    assert reasons == {"a": None, "b": "CODE_MODE_ARTIFACT_MAX_RUN_MB", "c": None, "d": "CODE_MODE_ARTIFACT_MAX_FILES"}


def test_a_file_the_run_never_finished_is_not_kept(tmp_path: Path) -> None:
    run = files(tmp_path)
    run.write("half.txt", b"abc", end=False)
    ((entry, staged),) = run.entries([FileEntry("half.txt", 6)])
    assert staged is None and entry.dropped is not None and entry.dropped.startswith("incomplete")


@pytest.mark.parametrize("path", ["../x", "/etc/passwd", "a/../../x", "a\x00b", "", ".", "a/\nb"])
def test_a_file_message_whose_path_leaves_the_workspace_or_hides_characters_is_refused(path: str) -> None:
    with pytest.raises(ProtocolError, match="invalid path"):
        parse_run_message({"op": "file", "path": path, "data": "", "end": True})


def test_a_file_message_whose_data_is_not_base64_is_refused() -> None:
    with pytest.raises(ProtocolError, match="not base64"):
        parse_run_message({"op": "file", "path": "a.txt", "data": "%%%", "end": True})


def test_a_shown_image_must_be_what_it_claims_within_the_size_and_count_caps(tmp_path: Path) -> None:
    run = files(tmp_path, inline_image=100)
    run.show(PNG, "image/png")
    run.show(b"not an image at all", "image/png")
    run.show(PNG, "image/jpeg")
    run.show(PNG + b"x" * 100, "image/png")
    for _ in range(20):
        run.show(PNG, "image/png")
    assert len(run.images) == 10
    assert run.refused_images[:3] == [
        "not an image of type 'image/png' (png, jpeg, gif or webp)",
        "not an image of type 'image/jpeg' (png, jpeg, gif or webp)",
        "an image of 170 bytes is over CODE_MODE_ARTIFACT_INLINE_IMAGE_KB",
    ]
    assert run.refused_images[3:] == ["more than 10 images shown"] * 11


def test_a_file_the_host_cannot_write_is_not_kept_and_the_run_goes_on(tmp_path: Path) -> None:
    (tmp_path / "staging").write_text("a file where the staging directory should be", encoding="utf-8")
    run = files(tmp_path)
    run.write("a.txt", b"abc", end=True)  # no exception reaches the host loop
    ((entry, staged),) = run.entries([FileEntry("a.txt", 3)])
    assert staged is None and entry.dropped is not None and entry.dropped.startswith("not kept: ")


def test_a_flood_of_forged_files_and_images_past_the_caps_leaves_a_bounded_record(tmp_path: Path) -> None:
    """A script can send any number of tiny files under new names, and any number of images: past the caps the
    host keeps no more than a bounded list of refusals, so neither its memory nor the result grows with the flood."""
    from mcp_code_mode.artifacts._files import MAX_REFUSALS

    run = files(tmp_path, max_files=3)
    for i in range(20_000):
        run.write(f"f{i}.txt", b"x", end=True)
        run.show(b"not an image", "image/png")
    assert len(run.staged) == 3
    assert len(run.dropped) == MAX_REFUSALS and set(run.dropped.values()) == {"CODE_MODE_ARTIFACT_MAX_FILES"}
    assert len(run.refused_images) == MAX_REFUSALS
    assert len(run.entries([])) == 3 + MAX_REFUSALS
