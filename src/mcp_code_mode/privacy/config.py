"""The servers file's top-level ``pii`` key: which detectors are on, custom kinds, the regions of phone numbers.

::

    "pii": {
      "detectors": {"ip": false},
      "custom": [{"kind": "employee_id", "regex": "EMP-\\\\d{6}"}],
      "phoneRegions": ["US", "GB"]
    }

- ``detectors``: a built-in kind (``email``, ``phone``, ``card``, ``iban``, ``ip``, ``ssn``) to ``true`` or
  ``false``; every built-in is on unless set ``false``.
- ``custom``: kinds of our own, each a name (lower case, ``[a-z][a-z0-9_]*``, not a built-in's) and a Python
  regular expression; what it matches becomes ``[EMPLOYEE_ID_1]``.
- ``phoneRegions``: the regions whose national formats are read as phone numbers (ISO 3166 codes; ``US``,
  ``GB``, ``DE`` and ``FR`` when unset). Numbers in international form (``+44 20 7946 0958``) are found
  whatever the regions.

Which servers' results are tokenized is each server entry's ``pii`` (``tokenize`` or ``off``) and
``CODE_MODE_PII``; which tools may receive a kind in plaintext is each server's ``policy.pii.sinks``
(``governance.policy``).
"""

from __future__ import annotations

import re

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator, model_validator

from .vault import KIND

BUILTIN_KINDS: tuple[str, ...] = ("email", "phone", "card", "iban", "ip", "ssn")
"""The built-in detectors' kinds (``detect.KINDS``)."""
DEFAULT_PHONE_REGIONS: tuple[str, ...] = ("US", "GB", "DE", "FR")
"""The regions whose national formats are read when ``phoneRegions`` is unset (those the labelled set measures
the phone detector with: ``bench/pii_detection.py``)."""


class CustomDetector(BaseModel):
    """A kind of our own: its name and the regular expression that finds it."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    kind: str
    """The kind's name, e.g. ``employee_id`` (its tokens: ``[EMPLOYEE_ID_1]``)."""
    regex: str
    """A Python regular expression; every match is one value."""

    @field_validator("kind")
    @classmethod
    def _a_kind(cls, kind: str) -> str:
        if not KIND.fullmatch(kind):
            raise ValueError(f"kind {kind!r} must be lower case letters, digits and '_', starting with a letter")
        if kind in BUILTIN_KINDS or kind == "secret":
            raise ValueError(f"kind {kind!r} is a built-in kind; give the custom one another name")
        return kind

    @field_validator("regex")
    @classmethod
    def _a_regex(cls, regex: str) -> str:
        try:
            compiled = re.compile(regex)
        except re.error as exc:
            raise ValueError(f"invalid regex {regex!r}: {exc}") from None
        if compiled.fullmatch(""):
            raise ValueError(f"regex {regex!r} matches the empty string")
        return regex


class PrivacyConfig(BaseModel):
    """The servers file's top-level ``pii``."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True, populate_by_name=True)

    detectors: dict[str, bool] = Field(default_factory=dict[str, bool])
    """Built-in kinds turned on or off (every one is on unless set false)."""
    custom: list[CustomDetector] = Field(default_factory=list[CustomDetector])
    """Kinds of our own, each a name and a regular expression."""
    phone_regions: list[str] = Field(
        default_factory=lambda: list(DEFAULT_PHONE_REGIONS),
        validation_alias=AliasChoices("phoneRegions", "phone_regions"),
    )
    """Regions whose national formats are read as phone numbers (``DEFAULT_PHONE_REGIONS`` when unset)."""

    @field_validator("detectors")
    @classmethod
    def _known_detectors(cls, detectors: dict[str, bool]) -> dict[str, bool]:
        unknown = sorted(set(detectors) - set(BUILTIN_KINDS))
        if unknown:
            raise ValueError(f"unknown detector {unknown[0]!r} (built-in: {', '.join(BUILTIN_KINDS)})")
        return detectors

    @field_validator("phone_regions")
    @classmethod
    def _regions(cls, regions: list[str]) -> list[str]:
        import phonenumbers

        known = phonenumbers.SUPPORTED_REGIONS
        for region in regions:
            if region.upper() not in known:
                raise ValueError(f"unknown phone region {region!r} (ISO 3166 codes such as US, GB, DE)")
        return [r.upper() for r in regions]

    @model_validator(mode="after")
    def _distinct_custom(self) -> PrivacyConfig:
        names = [c.kind for c in self.custom]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"custom kind {twice[0]!r} is defined twice")
        return self

    def kinds(self) -> tuple[str, ...]:
        """Every kind that is on: the built-ins not turned off, then the custom ones."""
        return (*(k for k in BUILTIN_KINDS if self.detectors.get(k, True)), *(c.kind for c in self.custom))


__all__ = ["BUILTIN_KINDS", "CustomDetector", "PrivacyConfig"]
