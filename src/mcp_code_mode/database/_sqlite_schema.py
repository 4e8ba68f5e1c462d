"""The SQLite cache database's schema: numbered migrations, applied in order, recorded in ``PRAGMA user_version``.

(PostgreSQL has its own numbered list, ``_postgres_schema``, with the same tables as of migration 8.)

A migration is appended, never edited: a database at version N runs migrations N+1… when opened.
A database whose version is newer than ``SCHEMA_VERSION`` came from a newer build; it is moved aside.
"""

from __future__ import annotations

MIGRATIONS: tuple[str, ...] = (
    # 1: scripts, their full-text index and their embedding vectors; counters for the hit rate.
    """
    CREATE TABLE scripts (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        hash TEXT NOT NULL UNIQUE,
        code_key TEXT NOT NULL,
        language TEXT NOT NULL,
        runner TEXT NOT NULL,
        code TEXT NOT NULL,
        packages TEXT NOT NULL DEFAULT '[]',
        description TEXT NOT NULL DEFAULT '',
        description_given INTEGER NOT NULL DEFAULT 0,
        output TEXT NOT NULL DEFAULT '',
        return_value TEXT NOT NULL DEFAULT 'null',
        truncated INTEGER NOT NULL DEFAULT 0,
        files TEXT NOT NULL DEFAULT '[]',
        tools TEXT NOT NULL DEFAULT '[]',
        tool_names TEXT NOT NULL DEFAULT '',
        tool_calls INTEGER NOT NULL DEFAULT 0,
        network INTEGER NOT NULL DEFAULT 0,
        execution_ms REAL NOT NULL DEFAULT 0,
        run_count INTEGER NOT NULL DEFAULT 1,
        hit_count INTEGER NOT NULL DEFAULT 0,
        created_at REAL NOT NULL,
        last_run_at REAL NOT NULL,
        last_used_at REAL NOT NULL
    );
    CREATE INDEX scripts_code_key ON scripts(code_key);
    CREATE INDEX scripts_last_used ON scripts(last_used_at);
    CREATE INDEX scripts_language ON scripts(language, last_used_at);

    CREATE VIRTUAL TABLE scripts_fts USING fts5(
        description, tool_names, code, content='scripts', content_rowid='id', tokenize='porter unicode61'
    );
    CREATE TRIGGER scripts_ai AFTER INSERT ON scripts BEGIN
        INSERT INTO scripts_fts(rowid, description, tool_names, code)
        VALUES (new.id, new.description, new.tool_names, new.code);
    END;
    CREATE TRIGGER scripts_ad AFTER DELETE ON scripts BEGIN
        INSERT INTO scripts_fts(scripts_fts, rowid, description, tool_names, code)
        VALUES ('delete', old.id, old.description, old.tool_names, old.code);
        DELETE FROM vectors WHERE script_id = old.id;
    END;
    CREATE TRIGGER scripts_au AFTER UPDATE OF description, tool_names, code ON scripts BEGIN
        INSERT INTO scripts_fts(scripts_fts, rowid, description, tool_names, code)
        VALUES ('delete', old.id, old.description, old.tool_names, old.code);
        INSERT INTO scripts_fts(rowid, description, tool_names, code)
        VALUES (new.id, new.description, new.tool_names, new.code);
    END;

    CREATE TABLE vectors (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        script_id INTEGER NOT NULL UNIQUE,
        model TEXT NOT NULL,
        vector BLOB NOT NULL
    );
    CREATE INDEX vectors_model ON vectors(model, id);

    CREATE TABLE counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL DEFAULT 0);
    INSERT INTO counters(name, value) VALUES ('lookups', 0), ('hits', 0), ('replays', 0), ('stores', 0);
    """,
    # 2: the key version of each row (``keys.KEY_VERSION``). Rows from before it were keyed by
    # normalised code, without the network policy or the runner's identity: they keep 1, which no
    # lookup asks for, and stay listed, searchable and exportable.
    """
    ALTER TABLE scripts ADD COLUMN key_version INTEGER NOT NULL DEFAULT 1;
    """,
    # 3: what a run did through the egress proxy (``bridge.NetworkUse`` as JSON; NULL without the network).
    # ``network`` now means the run used the network, not that it was granted it.
    """
    ALTER TABLE scripts ADD COLUMN network_use TEXT;
    """,
    # 4: the audit log (``audit.AuditLog``: one row per tool call a run asked for, whatever was decided) and
    # the plans a client may approve (bound to a code hash and a client, until ``expires_at``, used once).
    """
    CREATE TABLE audit (
        id INTEGER PRIMARY KEY,
        at REAL NOT NULL,
        client TEXT NOT NULL,
        run_id TEXT NOT NULL,
        code_hash TEXT NOT NULL,
        run_hash TEXT,
        server TEXT NOT NULL,
        tool TEXT NOT NULL,
        arguments_digest TEXT NOT NULL,
        preview TEXT NOT NULL,
        decision TEXT NOT NULL,
        ms REAL NOT NULL,
        ok INTEGER NOT NULL,
        error TEXT
    );
    CREATE INDEX audit_at ON audit(at);
    CREATE INDEX audit_run_id ON audit(run_id);
    CREATE INDEX audit_code_hash ON audit(code_hash);
    CREATE INDEX audit_run_hash ON audit(run_hash);
    CREATE INDEX audit_server_tool ON audit(server, tool);

    CREATE TABLE plans (
        id TEXT PRIMARY KEY,
        code_hash TEXT NOT NULL,
        client TEXT NOT NULL,
        created_at REAL NOT NULL,
        expires_at REAL NOT NULL,
        calls TEXT NOT NULL DEFAULT '[]',
        used_at REAL
    );
    CREATE INDEX plans_expires ON plans(expires_at);
    """,
    # 5: privacy (``mcp_code_mode.privacy``). ``audit.pii``: which kinds of tokens a call's arguments had
    # restored or withheld (JSON, NULL when none). ``scripts.pii_tokens``: the tokens a stored run's output,
    # return value and file names hold, with their values, sealed (AES-GCM; ``privacy.seal``), so a replay
    # to another client re-tokenizes them; NULL when none. ``pii_vault``: the persisted vault
    # (``CODE_MODE_PII_VAULT=database``): per client (an HMAC of its name) each token with an HMAC of its
    # value (to find a value's token) and the value sealed, never in plaintext. ``pii_counters``: the last
    # number given per client and kind (a number is never given twice, even after its token expired).
    """
    ALTER TABLE audit ADD COLUMN pii TEXT;
    ALTER TABLE scripts ADD COLUMN pii_tokens BLOB;
    CREATE TABLE pii_vault (
        client BLOB NOT NULL,
        token TEXT NOT NULL,
        kind TEXT NOT NULL,
        number INTEGER NOT NULL,
        value_mac BLOB NOT NULL,
        sealed BLOB NOT NULL,
        origins TEXT NOT NULL DEFAULT '[]',
        expires_at REAL NOT NULL,
        PRIMARY KEY (client, token),
        UNIQUE (client, value_mac)
    );
    CREATE INDEX pii_vault_expires ON pii_vault(expires_at);
    CREATE TABLE pii_counters (
        client BLOB NOT NULL,
        kind TEXT NOT NULL,
        last INTEGER NOT NULL,
        PRIMARY KEY (client, kind)
    );
    """,
    # 6: skills (``mcp_code_mode.skills``): one row per saved version of a skill, the latest (highest
    # ``version``) being the one runs call. ``parameters``: its JSON Schema; ``tools``: the tools it calls with
    # the schema hash each had when it was saved (JSON); ``author``: the client that saved it.
    """
    CREATE TABLE skills (
        name TEXT NOT NULL,
        version INTEGER NOT NULL,
        language TEXT NOT NULL,
        description TEXT NOT NULL DEFAULT '',
        code TEXT NOT NULL,
        parameters TEXT NOT NULL DEFAULT '{}',
        tools TEXT NOT NULL DEFAULT '[]',
        author TEXT NOT NULL DEFAULT '',
        source_hash TEXT,
        created_at REAL NOT NULL,
        PRIMARY KEY (name, version)
    );
    """,
    # 7: the artifacts (``artifacts.ArtifactStore``),
    # files runs left, kept on disk under ``<cache root>/artifacts/<file>`` (a name the host chose), each readable
    # by the client that made the run (``client``) as ``code-mode://runs/<run_hash>/files/<path>`` until
    # ``expires_at``; ``path`` is the name the client was shown (masked by privacy).
    """
    CREATE TABLE IF NOT EXISTS artifacts (
        id INTEGER PRIMARY KEY,
        run_hash TEXT NOT NULL,
        client TEXT NOT NULL,
        path TEXT NOT NULL,
        file TEXT NOT NULL,
        size INTEGER NOT NULL,
        mime TEXT NOT NULL,
        created_at REAL NOT NULL,
        expires_at REAL NOT NULL,
        UNIQUE (client, run_hash, path)
    );
    CREATE INDEX IF NOT EXISTS artifacts_expires ON artifacts(expires_at);
    CREATE INDEX IF NOT EXISTS artifacts_created ON artifacts(created_at);
    """,
    # 8: tenants (``mcp_code_mode.tenants``): every stored row belongs to one, rows from before to ``default``.
    # Keys that were global are per tenant (a script's hash, a skill's name and version, a client's artifacts,
    # PII tokens and counters; the counters themselves). SQLite cannot change a table's keys in place, so those
    # tables are rebuilt with the same rows and ids (the full-text index keeps pointing at the same rowids).
    # ``sessions``: where each open session lives (its replica), so that another replica can say so.
    """
    DROP TRIGGER scripts_ai;
    DROP TRIGGER scripts_ad;
    DROP TRIGGER scripts_au;
    CREATE TABLE scripts_new (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        tenant TEXT NOT NULL DEFAULT 'default',
        hash TEXT NOT NULL,
        code_key TEXT NOT NULL,
        language TEXT NOT NULL,
        runner TEXT NOT NULL,
        code TEXT NOT NULL,
        packages TEXT NOT NULL DEFAULT '[]',
        description TEXT NOT NULL DEFAULT '',
        description_given INTEGER NOT NULL DEFAULT 0,
        output TEXT NOT NULL DEFAULT '',
        return_value TEXT NOT NULL DEFAULT 'null',
        truncated INTEGER NOT NULL DEFAULT 0,
        files TEXT NOT NULL DEFAULT '[]',
        tools TEXT NOT NULL DEFAULT '[]',
        tool_names TEXT NOT NULL DEFAULT '',
        tool_calls INTEGER NOT NULL DEFAULT 0,
        network INTEGER NOT NULL DEFAULT 0,
        execution_ms REAL NOT NULL DEFAULT 0,
        run_count INTEGER NOT NULL DEFAULT 1,
        hit_count INTEGER NOT NULL DEFAULT 0,
        created_at REAL NOT NULL,
        last_run_at REAL NOT NULL,
        last_used_at REAL NOT NULL,
        key_version INTEGER NOT NULL DEFAULT 1,
        network_use TEXT,
        pii_tokens BLOB,
        UNIQUE (tenant, hash)
    );
    INSERT INTO scripts_new(id, hash, code_key, language, runner, code, packages, description, description_given,
        output, return_value, truncated, files, tools, tool_names, tool_calls, network, execution_ms, run_count,
        hit_count, created_at, last_run_at, last_used_at, key_version, network_use, pii_tokens)
    SELECT id, hash, code_key, language, runner, code, packages, description, description_given,
        output, return_value, truncated, files, tools, tool_names, tool_calls, network, execution_ms, run_count,
        hit_count, created_at, last_run_at, last_used_at, key_version, network_use, pii_tokens FROM scripts;
    DROP TABLE scripts;
    ALTER TABLE scripts_new RENAME TO scripts;
    CREATE INDEX scripts_code_key ON scripts(tenant, code_key);
    CREATE INDEX scripts_last_used ON scripts(last_used_at);
    CREATE INDEX scripts_tenant_used ON scripts(tenant, last_used_at);
    CREATE INDEX scripts_language ON scripts(tenant, language, last_used_at);
    CREATE TRIGGER scripts_ai AFTER INSERT ON scripts BEGIN
        INSERT INTO scripts_fts(rowid, description, tool_names, code)
        VALUES (new.id, new.description, new.tool_names, new.code);
    END;
    CREATE TRIGGER scripts_ad AFTER DELETE ON scripts BEGIN
        INSERT INTO scripts_fts(scripts_fts, rowid, description, tool_names, code)
        VALUES ('delete', old.id, old.description, old.tool_names, old.code);
        DELETE FROM vectors WHERE script_id = old.id;
    END;
    CREATE TRIGGER scripts_au AFTER UPDATE OF description, tool_names, code ON scripts BEGIN
        INSERT INTO scripts_fts(scripts_fts, rowid, description, tool_names, code)
        VALUES ('delete', old.id, old.description, old.tool_names, old.code);
        INSERT INTO scripts_fts(rowid, description, tool_names, code)
        VALUES (new.id, new.description, new.tool_names, new.code);
    END;

    CREATE TABLE counters_new (
        tenant TEXT NOT NULL DEFAULT 'default',
        name TEXT NOT NULL,
        value INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (tenant, name)
    );
    INSERT INTO counters_new(tenant, name, value) SELECT 'default', name, value FROM counters;
    DROP TABLE counters;
    ALTER TABLE counters_new RENAME TO counters;

    ALTER TABLE audit ADD COLUMN tenant TEXT NOT NULL DEFAULT 'default';
    CREATE INDEX audit_tenant_at ON audit(tenant, at);
    ALTER TABLE plans ADD COLUMN tenant TEXT NOT NULL DEFAULT 'default';

    CREATE TABLE skills_new (
        tenant TEXT NOT NULL DEFAULT 'default',
        name TEXT NOT NULL,
        version INTEGER NOT NULL,
        language TEXT NOT NULL,
        description TEXT NOT NULL DEFAULT '',
        code TEXT NOT NULL,
        parameters TEXT NOT NULL DEFAULT '{}',
        tools TEXT NOT NULL DEFAULT '[]',
        author TEXT NOT NULL DEFAULT '',
        source_hash TEXT,
        created_at REAL NOT NULL,
        PRIMARY KEY (tenant, name, version)
    );
    INSERT INTO skills_new(name, version, language, description, code, parameters, tools, author, source_hash,
        created_at)
    SELECT name, version, language, description, code, parameters, tools, author, source_hash, created_at FROM skills;
    DROP TABLE skills;
    ALTER TABLE skills_new RENAME TO skills;

    CREATE TABLE artifacts_new (
        id INTEGER PRIMARY KEY,
        tenant TEXT NOT NULL DEFAULT 'default',
        run_hash TEXT NOT NULL,
        client TEXT NOT NULL,
        path TEXT NOT NULL,
        file TEXT NOT NULL,
        size INTEGER NOT NULL,
        mime TEXT NOT NULL,
        created_at REAL NOT NULL,
        expires_at REAL NOT NULL,
        data BLOB,
        UNIQUE (tenant, client, run_hash, path)
    );
    INSERT INTO artifacts_new(id, run_hash, client, path, file, size, mime, created_at, expires_at)
    SELECT id, run_hash, client, path, file, size, mime, created_at, expires_at FROM artifacts;
    DROP TABLE artifacts;
    ALTER TABLE artifacts_new RENAME TO artifacts;
    CREATE INDEX artifacts_expires ON artifacts(expires_at);
    CREATE INDEX artifacts_created ON artifacts(tenant, created_at);

    CREATE TABLE pii_vault_new (
        tenant TEXT NOT NULL DEFAULT 'default',
        client BLOB NOT NULL,
        token TEXT NOT NULL,
        kind TEXT NOT NULL,
        number INTEGER NOT NULL,
        value_mac BLOB NOT NULL,
        sealed BLOB NOT NULL,
        origins TEXT NOT NULL DEFAULT '[]',
        expires_at REAL NOT NULL,
        PRIMARY KEY (tenant, client, token),
        UNIQUE (tenant, client, value_mac)
    );
    INSERT INTO pii_vault_new(client, token, kind, number, value_mac, sealed, origins, expires_at)
    SELECT client, token, kind, number, value_mac, sealed, origins, expires_at FROM pii_vault;
    DROP TABLE pii_vault;
    ALTER TABLE pii_vault_new RENAME TO pii_vault;
    CREATE INDEX pii_vault_expires ON pii_vault(expires_at);
    CREATE TABLE pii_counters_new (
        tenant TEXT NOT NULL DEFAULT 'default',
        client BLOB NOT NULL,
        kind TEXT NOT NULL,
        last INTEGER NOT NULL,
        PRIMARY KEY (tenant, client, kind)
    );
    INSERT INTO pii_counters_new(client, kind, last) SELECT client, kind, last FROM pii_counters;
    DROP TABLE pii_counters;
    ALTER TABLE pii_counters_new RENAME TO pii_counters;

    CREATE TABLE sessions (
        tenant TEXT NOT NULL,
        id TEXT NOT NULL,
        client TEXT NOT NULL,
        replica TEXT NOT NULL,
        opened_at REAL NOT NULL,
        last_used_at REAL NOT NULL,
        PRIMARY KEY (tenant, id)
    );
    CREATE INDEX sessions_used ON sessions(last_used_at);
    """,
)

SCHEMA_VERSION = len(MIGRATIONS)
