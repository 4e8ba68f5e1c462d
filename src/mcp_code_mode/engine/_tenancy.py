"""What the engine decides per tenant (``tenants.current_tenant``): the tool policy and the per-minute rates.

A tenant's ``policy`` file (``tenants.load_policy_file``) replaces, for its runs, the servers file's policy of each
server it names; the others keep the servers file's. Each tenant counts its own ``perMinute`` rates, so one
tenant's calls never use up another's.
"""

from __future__ import annotations

from ..config import CodeModeConfig
from ..governance import PolicyBook, RateLimiter
from ..tenants import DEFAULT_TENANT, Tenant, current_tenant, load_policy_file


class TenantRules:
    """The servers file's policy, each tenant's (made on first use) and each tenant's rate counters."""

    def __init__(self, config: CodeModeConfig) -> None:
        self.config = config
        self.wide = PolicyBook({name: entry.policy for name, entry in config.servers.items()}, config.settings.policy)
        """Each server's tool policy (the servers file's ``policy`` entries, ``CODE_MODE_POLICY``)."""
        self.default_rate = RateLimiter()
        """Per-minute rates of tools across the runs of tenant ``default``."""
        self._books: dict[Tenant, PolicyBook] = {}
        self._rates: dict[str, RateLimiter] = {}

    def policy(self, tenant: Tenant | None = None) -> PolicyBook:
        """The tool policy of ``tenant`` (default: the one acting now)."""
        tenant = tenant or current_tenant()
        if tenant.policy is None:
            return self.wide
        book = self._books.get(tenant)
        if book is None:
            servers = self.config.servers
            allowed = tenant.servers if tenant.servers is not None else list(servers)
            own = load_policy_file(tenant.policy, allowed)  # checked at start-up (CODE_MODE_AUTH_TOKENS) already
            wide = {name: entry.policy for name, entry in servers.items()}
            book = self._books[tenant] = PolicyBook({**wide, **own}, self.config.settings.policy)
        return book

    def rate(self, tenant: Tenant | None = None) -> RateLimiter:
        """The per-minute counts of ``tenant`` (default: the one acting now)."""
        tenant = tenant or current_tenant()
        if tenant == DEFAULT_TENANT:
            return self.default_rate
        return self._rates.setdefault(tenant.name, RateLimiter())


__all__ = ["TenantRules"]
