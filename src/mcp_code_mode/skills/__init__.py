"""Skills: scripts promoted into typed functions that later runs of their language call as ``skills.name``.

``model`` (what a skill is, read from its code without running it), ``store`` (versions in the cache
database), ``book`` (staleness, what runs get, what listings show), ``saving`` (``save_skill``), ``folders``
(export and import as Agent Skills folders).
"""

from .book import SkillBook
from .model import SkillError, SkillVersion, ToolRef
from .store import SkillStore

__all__ = ["SkillBook", "SkillError", "SkillStore", "SkillVersion", "ToolRef"]
