"""The labelled set of the detectors (``data/pii_labelled.jsonl``) and how a detector is scored on it; shared by
``test_detect.py`` and ``bench/pii_detection.py``."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from mcp_code_mode.privacy.detect import KINDS, Detectors

LABELLED = Path(__file__).parent / "data" / "pii_labelled.jsonl"


def score(lines: list[str], detectors: Detectors) -> dict[str, tuple[int, int, int]]:
    """Per kind: (true positives, false positives, false negatives), a found value matched to a label of the
    same kind and value in the same line."""
    tp: Counter[str] = Counter()
    fp: Counter[str] = Counter()
    fn: Counter[str] = Counter()
    for line in lines:
        row = json.loads(line)
        want = Counter((f["kind"], f["value"]) for f in row["found"])
        got = Counter((f.kind, f.value) for f in detectors.find(row["text"]))
        for key in want | got:
            hit = min(want[key], got[key])
            tp[key[0]] += hit
            fp[key[0]] += got[key] - hit
            fn[key[0]] += want[key] - hit
    return {kind: (tp[kind], fp[kind], fn[kind]) for kind in KINDS}
