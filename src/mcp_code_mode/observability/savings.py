"""The savings meter: what a run's work would have cost as direct tool calls.

``roundTrips``: the run's tool calls that reached a server (each would have been a model round trip).
``tokens``: o200k tokens of those calls' results as a client would have put them in the model's context (the
text of their text blocks, else their structured content as compact JSON; error messages too), which stayed
in the sandbox. The run's own output and return value did reach the model and are not subtracted.

Counting tokens costs CPU (the tokenizer is pure Python, about 1.5 MB/s), so nothing is counted on a call's
path: ``SavingsMeter.add`` keeps a slice of each result's text, up to ``EXACT_CHARS`` for the whole run, and
the length of the rest; ``count`` (called once after the run, in a worker thread) counts the slices exactly
and estimates the rest at the slices' tokens per character (4 characters a token when nothing was kept).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import mcp_types as types

EXACT_CHARS = 16_384
"""Characters of a run's results counted exactly; beyond, tokens are estimated at the same rate."""
CHARS_PER_TOKEN = 4.0
"""The estimate when nothing was counted exactly."""


def result_text(result: types.CallToolResult) -> str:
    """A tool result as a client puts it in a model's context: its text blocks, else its structured content."""
    texts = [b.text for b in result.content if isinstance(b, types.TextContent)]
    if texts:
        return "\n".join(texts)
    if result.structured_content is not None:
        return json.dumps(result.structured_content, ensure_ascii=False, separators=(",", ":"))
    return ""


@dataclass
class SavingsMeter:
    """The results of one run's calls (``add``), counted once after the run (``count``); the round trips are the
    dispatcher's calls that reached a server."""

    kept: list[str] = field(default_factory=list[str])
    kept_chars: int = 0
    uncounted_chars: int = 0

    def add_text(self, text: str) -> None:
        room = EXACT_CHARS - self.kept_chars
        if room > 0 and text:
            piece = text[:room]
            self.kept.append(piece)
            self.kept_chars += len(piece)
            self.uncounted_chars += len(text) - len(piece)
        else:
            self.uncounted_chars += len(text)

    def add(self, result: types.CallToolResult) -> None:
        self.add_text(result_text(result))

    def add_value(self, value: Any) -> None:
        """A resource's or prompt's value (``resources/read``, ...) as JSON text."""
        self.add_text(value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str))

    @property
    def empty(self) -> bool:
        return not self.kept and not self.uncounted_chars

    def count(self) -> int:
        """The tokens: exact for the kept slices, estimated for the rest. Blocking: call it in a thread."""
        from ..tokens import count_tokens

        exact = sum(count_tokens(piece) for piece in self.kept)
        if not self.uncounted_chars:
            return exact
        rate = exact / self.kept_chars if self.kept_chars else 1 / CHARS_PER_TOKEN
        return exact + round(self.uncounted_chars * rate)


__all__ = ["CHARS_PER_TOKEN", "EXACT_CHARS", "SavingsMeter", "result_text"]
