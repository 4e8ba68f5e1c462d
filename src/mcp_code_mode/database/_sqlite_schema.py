"""The cache database's schema: numbered migrations, applied in order, recorded in ``PRAGMA user_version``.

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
)

SCHEMA_VERSION = len(MIGRATIONS)
