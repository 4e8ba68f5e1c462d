"""The deployment files (Dockerfile, compose.yaml, deploy/) agree with the code they deploy: every ``CODE_MODE_*``
variable is a setting, the command lines parse with the real CLI parser, the ports and health-check paths are
the server's, the Secret and ConfigMap are mounted where the settings point, and the entrypoint reads secret
files as it says. No Docker daemon or cluster is needed."""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import subprocess
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from mcp_code_mode import config as config_module
from mcp_code_mode.cli import _parser
from mcp_code_mode.config import ENV_PREFIX, Settings, parse_servers
from mcp_code_mode.http_server import HttpOptions
from mcp_code_mode.tenants import parse_tenants

from .conftest import ROOT

DOCKERFILE = ROOT / "Dockerfile"
COMPOSE = ROOT / "compose.yaml"
NGINX = ROOT / "deploy" / "nginx" / "nginx.conf"
NGINX_PARTS = [NGINX, NGINX.with_name("code-mode.conf"), NGINX.with_name("code-mode-proxy.conf")]
ENTRYPOINT = ROOT / "deploy" / "docker" / "entrypoint.sh"
IMAGE_SERVERS = ROOT / "deploy" / "docker" / "mcp_servers.json"
K8S = ROOT / "deploy" / "k8s"
FILES = [DOCKERFILE, COMPOSE, *NGINX_PARTS, ENTRYPOINT, *sorted(K8S.glob("*.yaml")), K8S / "README.md"]

PORT = 8000
SERVE = ["serve", "--http", "--stateless", "--host", "0.0.0.0", "--port", str(PORT)]


def nginx_text() -> str:
    return "\n".join(part.read_text(encoding="utf-8") for part in NGINX_PARTS)


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def compose() -> dict[str, Any]:
    return load_yaml(COMPOSE)


def replicas() -> dict[str, dict[str, Any]]:
    return {name: svc for name, svc in compose()["services"].items() if name.startswith("replica-")}


def k8s(kind: str) -> dict[str, Any]:
    found = [doc for path in sorted(K8S.glob("*.yaml")) for doc in yaml.safe_load_all(path.read_text("utf-8"))]
    matching = [doc for doc in found if doc and doc.get("kind") == kind]
    assert len(matching) == 1, f"expected one {kind} in deploy/k8s, found {len(matching)}"
    return matching[0]


def container() -> dict[str, Any]:
    return k8s("Deployment")["spec"]["template"]["spec"]["containers"][0]


def k8s_env() -> dict[str, dict[str, Any]]:
    return {entry["name"]: entry for entry in container()["env"]}


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(instruction, arguments) of the Dockerfile, continuation lines joined, comments dropped."""
    lines: list[str] = []
    for raw in DOCKERFILE.read_text(encoding="utf-8").splitlines():
        if raw.lstrip().startswith("#"):
            continue
        if lines and lines[-1].endswith("\\"):
            lines[-1] = lines[-1][:-1] + " " + raw.strip()
        elif raw.strip():
            lines.append(raw.strip())
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines]


def dockerfile(instruction: str) -> list[str]:
    return [args for name, args in dockerfile_instructions() if name == instruction]


def compose_default(value: str) -> str:
    """compose's ``${VAR:-default}`` with VAR unset."""
    return re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", value)


def http_routes() -> set[str]:
    """The paths http_server.py registers with ``custom_route`` (read from its source, not from a running app)."""
    tree = ast.parse((ROOT / "src" / "mcp_code_mode" / "http_server.py").read_text(encoding="utf-8"))
    return {
        node.args[0].value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "custom_route"
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    }


def is_known(name: str) -> bool:
    setting = name.removeprefix(ENV_PREFIX).lower()
    if setting in Settings.model_fields or setting in config_module._NON_SETTINGS:
        return True
    base = name.removesuffix("_FILE")  # the entrypoint reads CODE_MODE_<NAME>_FILE into CODE_MODE_<NAME>
    return base != name and is_known(base)


# ----- settings ---------------------------------------------------------------------------------------------


def test_every_code_mode_variable_the_deployment_names_is_a_setting() -> None:
    unknown = {
        f"{path.relative_to(ROOT)}: {name}"
        for path in FILES
        for name in re.findall(r"\bCODE_MODE_[A-Z0-9_]+\b", path.read_text(encoding="utf-8"))
        if not is_known(name)
    }
    assert not unknown, f"not a setting (config.Settings) nor pending: {sorted(unknown)}"


def settings_values(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(ENV_PREFIX) and not k.endswith("_FILE")}


def test_the_settings_compose_and_kubernetes_give_are_valid_values() -> None:
    for name, service in replicas().items():
        env = {k: compose_default(str(v)) for k, v in service["environment"].items()}
        Settings.from_env(settings_values(env), source=f"compose.yaml {name}")
    env = {name: entry["value"] for name, entry in k8s_env().items() if "value" in entry}
    Settings.from_env(settings_values(env), source="deploy/k8s/deployment.yaml")
    image_env = {k: v for args in dockerfile("ENV") for k, v in (part.split("=", 1) for part in shlex.split(args))}
    Settings.from_env(settings_values(image_env), source="Dockerfile")


# ----- command lines and ports --------------------------------------------------------------------------------


def test_every_command_line_is_serve_http_stateless_on_port_8000_by_the_real_parser() -> None:
    commands = {
        "Dockerfile CMD": json.loads(dockerfile("CMD")[-1]),
        "deployment.yaml": container()["args"],
        **{f"compose.yaml {name}": service["command"] for name, service in replicas().items()},
    }
    for where, argv in commands.items():
        args = _parser().parse_args(argv)
        served = (args.command, args.http, args.stateless, args.host, args.port)
        assert served == ("serve", True, True, "0.0.0.0", PORT), where
        assert argv == SERVE, where


def test_the_image_runs_the_entrypoint_under_tini_and_the_entrypoint_runs_mcp_code_mode() -> None:
    assert json.loads(dockerfile("ENTRYPOINT")[-1]) == ["tini", "--", "mcp-code-mode-entrypoint"]
    copies = [shlex.split(args) for args in dockerfile("COPY")]
    assert ["deploy/docker/entrypoint.sh", "/usr/local/bin/mcp-code-mode-entrypoint"] in copies
    assert 'exec mcp-code-mode "$@"' in ENTRYPOINT.read_text(encoding="utf-8")
    assert os.access(ENTRYPOINT, os.X_OK)


def test_the_ports_agree_between_the_image_compose_nginx_and_kubernetes() -> None:
    assert dockerfile("EXPOSE") == [str(PORT)]
    assert HttpOptions.port == PORT  # the server's own default, in case a command line loses its --port
    upstream = re.findall(r"^\s*server\s+([\w.-]+):(\d+)", NGINX.read_text(encoding="utf-8"), re.MULTILINE)
    assert sorted(upstream) == sorted((name, str(PORT)) for name in replicas())
    ports = container()["ports"]
    assert ports == [{"name": "http", "containerPort": PORT}]
    assert [p["targetPort"] for p in k8s("Service")["spec"]["ports"]] == ["http"]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container()[probe]["httpGet"]["port"] == "http", probe


def test_every_health_check_asks_the_servers_own_healthz() -> None:
    assert "/healthz" in http_routes()
    url = f"http://127.0.0.1:{PORT}/healthz"
    checks = {"Dockerfile": dockerfile("HEALTHCHECK")[-1]}
    checks |= {f"compose.yaml {name}": " ".join(service["healthcheck"]["test"]) for name, service in replicas().items()}
    for where, check in checks.items():
        assert url in check, where
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container()[probe]["httpGet"]["path"] == "/healthz", probe
    assert re.search(r"location = /healthz", nginx_text())


# ----- compose ----------------------------------------------------------------------------------------------


def test_compose_has_three_replicas_each_with_its_own_id_postgres_with_pgvector_and_nginx() -> None:
    services = compose()["services"]
    ids = [service["environment"]["CODE_MODE_REPLICA_ID"] for service in replicas().values()]
    assert len(ids) == 3 and len(set(ids)) == 3
    assert services["postgres"]["image"] == "pgvector/pgvector:pg16"
    mounts = {ROOT / m.split(":")[0]: m.split(":")[1] for m in services["nginx"]["volumes"]}
    assert mounts == {part: f"/etc/nginx/{part.name}" for part in NGINX_PARTS}  # the includes sit beside it
    # nginx.conf maps each session's replica name to its upstream: the names compose gives its replicas
    names = set(re.findall(r"^\s*(\w+)\s+code_mode_\w+;", NGINX.read_text(encoding="utf-8"), re.MULTILINE))
    assert set(ids) <= names, (ids, names)


def test_compose_secrets_are_where_the_settings_point() -> None:
    declared = compose()["secrets"]
    for name, service in replicas().items():
        env = service["environment"]
        secrets = set(service["secrets"])
        assert secrets <= set(declared), name
        for variable in ("CODE_MODE_AUTH_TOKENS", "PGPASSWORD_FILE"):
            path = PurePosixPath(env[variable])
            assert path.parent == PurePosixPath("/run/secrets") and path.name in secrets, (name, variable)
        url = urlsplit(env["CODE_MODE_DATABASE_URL"])
        assert url.scheme == "postgresql" and url.password is None, "the password comes from the secret (PGPASSWORD)"
    postgres = compose()["services"]["postgres"]
    assert PurePosixPath(postgres["environment"]["POSTGRES_PASSWORD_FILE"]).name in postgres["secrets"]
    for service in replicas().values():  # one password file for both
        assert service["environment"]["PGPASSWORD_FILE"] == postgres["environment"]["POSTGRES_PASSWORD_FILE"]


# ----- kubernetes -------------------------------------------------------------------------------------------


def test_kubernetes_runs_three_replicas_with_resources() -> None:
    deployment = k8s("Deployment")
    assert deployment["spec"]["replicas"] == 3
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert k8s("Service")["spec"]["selector"].items() <= labels.items()
    resources = container()["resources"]
    assert {"cpu", "memory"} <= set(resources["requests"]) and {"cpu", "memory"} <= set(resources["limits"])


def volume_mounted_at(directory: PurePosixPath) -> dict[str, Any]:
    mounts = {PurePosixPath(m["mountPath"]): m["name"] for m in container()["volumeMounts"]}
    assert directory in mounts, f"nothing is mounted at {directory}"
    volumes = {v["name"]: v for v in k8s("Deployment")["spec"]["template"]["spec"]["volumes"]}
    return volumes[mounts[directory]]


def test_the_tokens_secret_is_mounted_where_code_mode_auth_tokens_points() -> None:
    path = PurePosixPath(k8s_env()["CODE_MODE_AUTH_TOKENS"]["value"])
    volume = volume_mounted_at(path.parent)
    secret = k8s("Secret")
    assert volume["secret"]["secretName"] == secret["metadata"]["name"]
    items = {item["path"]: item["key"] for item in volume["secret"].get("items", [])}
    key = items.get(path.name, path.name)
    assert key in secret["stringData"]
    # the placeholder is a tokens file the server accepts (and whose one hash no token has)
    book = parse_tenants(secret["stringData"][key], source="secret.yaml", base=Path("/"), servers=())
    assert [t.name for t in book.tenants] == ["example"]
    reference = k8s_env()["CODE_MODE_DATABASE_URL"]["valueFrom"]["secretKeyRef"]
    assert reference["name"] == secret["metadata"]["name"] and reference["key"] in secret["stringData"]
    assert secret["stringData"][reference["key"]].startswith("postgresql://")


def test_the_servers_configmap_is_mounted_where_code_mode_config_points_and_parses() -> None:
    path = PurePosixPath(k8s_env()["CODE_MODE_CONFIG"]["value"])
    volume = volume_mounted_at(path.parent)
    configmap = k8s("ConfigMap")
    assert volume["configMap"]["name"] == configmap["metadata"]["name"]
    text = configmap["data"][path.name]
    parsed = parse_servers(text, source="configmap", base_dir=Path("/etc/mcp-code-mode/config"))
    image = parse_servers(IMAGE_SERVERS.read_text(encoding="utf-8"), source="image", base_dir=Path("/etc"))
    assert set(parsed) == set(image) == {"filesystem", "memory"}
    assert json.loads(text)["servers"]["memory"] == json.loads(IMAGE_SERVERS.read_text("utf-8"))["servers"]["memory"]
    dependencies = json.loads((ROOT / "package.json").read_text(encoding="utf-8"))["dependencies"]
    for server in parsed.values():  # the image's `npm ci` installs each server's bin under /app/node_modules/.bin
        assert server.command and server.command.startswith("/app/node_modules/.bin/mcp-server-")
        assert f"@modelcontextprotocol/{Path(server.command).name.removeprefix('mcp-')}" in dependencies


def test_isolation_needs_the_same_capabilities_everywhere() -> None:
    capabilities = {"SYS_ADMIN", "NET_ADMIN"}
    security = container()["securityContext"]
    assert set(security["capabilities"]["add"]) == capabilities
    assert security["privileged"] is False and security["procMount"] == "Unmasked"
    assert "allowPrivilegeEscalation" not in security  # the API refuses false together with SYS_ADMIN
    header = DOCKERFILE.read_text(encoding="utf-8")
    for service in replicas().values():
        assert set(service["cap_add"]) == capabilities
        for option in service["security_opt"]:
            assert f"--security-opt {option}" in header
    for capability in capabilities:
        assert f"--cap-add {capability}" in header


# ----- the entrypoint ---------------------------------------------------------------------------------------


@pytest.fixture
def fake_server(tmp_path: Path) -> Path:
    """A directory with an ``mcp-code-mode`` that prints its environment's CODE_MODE_* and PG* entries."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "mcp-code-mode"
    fake.write_text('#!/bin/sh\necho "args: $*"\nenv | grep -E "^(CODE_MODE_|PG)" | sort\n', encoding="utf-8")
    fake.chmod(0o755)
    return bin_dir


def entrypoint(env: dict[str, str], bin_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", str(ENTRYPOINT), *args],
        env={"PATH": f"{bin_dir}:/usr/bin:/bin", **env},
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
    )


def test_the_entrypoint_reads_secret_files_into_their_variables(fake_server: Path, tmp_path: Path) -> None:
    (tmp_path / "key").write_text("a passphrase of twenty characters or more\n", encoding="utf-8")
    (tmp_path / "pg").write_text("s3cret\n", encoding="utf-8")
    env = {
        "CODE_MODE_PII_KEY_FILE": str(tmp_path / "key"),
        "PGPASSWORD_FILE": str(tmp_path / "pg"),
        "CODE_MODE_ENV_FILE": "/elsewhere/.env",
    }
    done = entrypoint(env, fake_server, "serve", "--http")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "args: serve --http"
    assert set(lines[1:]) == {
        "CODE_MODE_PII_KEY=a passphrase of twenty characters or more",
        "PGPASSWORD=s3cret",
        "CODE_MODE_ENV_FILE=/elsewhere/.env",  # a setting of its own, left alone
    }


def test_the_entrypoint_refuses_a_variable_given_twice_or_an_unreadable_file(fake_server: Path, tmp_path: Path) -> None:
    (tmp_path / "token").write_text("x" * 32, encoding="utf-8")
    twice = entrypoint(
        {"CODE_MODE_AUTH_TOKEN": "y" * 32, "CODE_MODE_AUTH_TOKEN_FILE": str(tmp_path / "token")}, fake_server
    )
    assert twice.returncode == 2 and "both CODE_MODE_AUTH_TOKEN and CODE_MODE_AUTH_TOKEN_FILE" in twice.stderr
    missing = entrypoint({"CODE_MODE_AUTH_TOKEN_FILE": str(tmp_path / "absent")}, fake_server)
    assert missing.returncode == 2 and "cannot read" in missing.stderr
    assert "args:" not in twice.stdout + missing.stdout


def test_the_proxy_and_the_pods_wait_longer_than_the_longest_run() -> None:
    settings = Settings()
    longest = (settings.max_timeout_ms + settings.queue_timeout_ms) / 1000  # a run's timeout starts after its queue
    nginx = nginx_text()
    for directive in ("proxy_read_timeout", "proxy_send_timeout"):
        seconds = re.findall(rf"{directive}\s+(\d+)s;", nginx)
        assert seconds and all(int(s) > longest for s in seconds), directive
    assert "proxy_buffering off;" in nginx  # progress and output stream as server-sent events
    grace = k8s("Deployment")["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace > settings.max_timeout_ms / 1000


def memory_mib(quantity: str) -> int:
    """A memory quantity as compose (``6g``) or Kubernetes (``6Gi``) writes it, in MiB."""
    match = re.fullmatch(r"(\d+)([a-zA-Z]*)", quantity)
    assert match is not None, quantity
    return int(match.group(1)) * {"g": 1024, "gi": 1024, "m": 1, "mi": 1}[match.group(2).lower()]


def test_the_runs_each_replica_admits_fit_its_memory_limit_with_room_for_the_server() -> None:
    """Admission's defaults read the machine's memory and cores, not the container's: both examples size it."""
    sized = {
        f"compose.yaml {name}": (service["environment"], service["deploy"]["resources"]["limits"]["memory"])
        for name, service in replicas().items()
    }
    k8s_values = {name: entry["value"] for name, entry in k8s_env().items() if "value" in entry}
    sized["deployment.yaml"] = (k8s_values, container()["resources"]["limits"]["memory"])
    for where, (env, limit) in sized.items():
        settings = Settings.from_env(settings_values({k: compose_default(str(v)) for k, v in env.items()}))
        assert settings.max_concurrent_runs is not None and settings.memory_budget_mb is not None, where
        assert settings.max_concurrent_runs * settings.limit_memory_mb <= settings.memory_budget_mb, where
        # The server, its warm workers and the downstream servers: about 1 GiB beside the runs.
        assert settings.memory_budget_mb + 1024 <= memory_mib(limit), where


def test_kustomize_applies_the_manifests_but_never_the_placeholder_secret() -> None:
    resources = load_yaml(K8S / "kustomization.yaml")["resources"]
    assert all((K8S / name).is_file() for name in resources)
    assert set(resources) == {"configmap.yaml", "deployment.yaml", "service.yaml"}
