"""Packages: the whitelist, requirement validation, and cached environments (see ``policy`` and ``envs``)."""

from __future__ import annotations

from .envs import Environment, PythonEnvironments, find_uv
from .policy import Whitelist, validate_npm, validate_python

__all__ = ["Environment", "PythonEnvironments", "Whitelist", "find_uv", "validate_npm", "validate_python"]
