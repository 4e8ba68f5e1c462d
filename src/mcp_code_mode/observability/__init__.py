"""Observability: metrics for ``GET /metrics`` (``metrics``, ``runs``) and the savings meter (``savings``)."""

from .metrics import CONTENT_TYPE, Registry
from .runs import RunMetrics

__all__ = ["CONTENT_TYPE", "Registry", "RunMetrics"]
