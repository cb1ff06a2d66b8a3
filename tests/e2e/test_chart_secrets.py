"""The chart takes every secret of the bridge and of the subscribers from Secrets, and only
from Secrets (issue 21, item 5):

- a password, token or the OTLP endpoint's headers as an environment variable from a
  ``secretKeyRef``, never a value: the values schema refuses ``nats.password`` and
  ``nats.token`` in each program's ``config``, the Alertmanager password and bearer token, the
  OTLP endpoint's headers, a plain ``*__PASSWORD``/``*__TOKEN``/``*__HEADERS`` in ``extraEnv``,
  each with a message naming the key and never echoing the value;
- a ``.creds`` file, an NKey seed, a bearer token file and TLS files mounted from Secrets,
  read-only, mode 0440 (the Pod's fsGroup lets the program's user read them), without subPath
  (a rotated Secret reaches the Pod), and the matching config keys written by the chart: the
  rendered config, with those files where the Pod mounts them, loads in each program's own
  settings and names them;
- what it renders with every secret set passes a server-side dry run on the real API server.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from bridge import settings as bridge_settings
from k8s_event_consumer.alerting import settings as alerting_settings
from k8s_event_consumer.otlp import settings as otlp_settings
from k8s_event_consumer.remediation import settings as remediation_settings
from tests import creds
from tests.e2e.test_chart import (
    CHART,
    NAMESPACE,
    RELEASE,
    chart_manifest,
    documents,
    helm,
    one,
    server_dry_run,
    values_file,
)
from tests.standins.controlplane import ControlPlane

GO_TOOLS = ("helm",)

MOUNTS = "/var/run/secrets/k8s-event-bridge"
SENTINEL = "s3ntinel-Secr3t-value"
ACT_IN = ["team-a", "team-b"]
SUBSCRIBERS_ON = {
    "alerting": {"enabled": True},
    "remediation": {"enabled": True, "namespaces": ACT_IN},
    "otlp": {"enabled": True},
}


def _deep_merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out = dict(a)
    for k, v in b.items():
        out[k] = _deep_merge(out[k], v) if isinstance(v, dict) and k in out else v
    return out


# program -> (where its values live, its workload, its ConfigMap's file, its env prefix, load)
PROGRAMS: dict[str, dict[str, Any]] = {
    "bridge": {
        "values": ("nats",),
        "workload": ("Deployment", RELEASE),
        "file": "bridge.yaml",
        "env": "BRIDGE_",
        "load": bridge_settings.load,
    },
    "alerting": {
        "values": ("alerting", "nats"),
        "workload": ("StatefulSet", f"{RELEASE}-alerting"),
        "file": "alerting.yaml",
        "env": "ALERTING_",
        "load": alerting_settings.load,
    },
    "remediation": {
        "values": ("remediation", "nats"),
        "workload": ("Deployment", f"{RELEASE}-remediation"),
        "file": "remediation.yaml",
        "env": "REMEDIATION_",
        "load": remediation_settings.load,
    },
    "otlp": {
        "values": ("otlp", "nats"),
        "workload": ("Deployment", f"{RELEASE}-otlp"),
        "file": "otlp.yaml",
        "env": "OTLP_",
        "load": otlp_settings.load,
    },
}


def _at(path: tuple[str, ...], value: dict[str, Any]) -> dict[str, Any]:
    for key in reversed(path):
        value = {key: value}
    return value


def _pod(objects: list[dict[str, Any]], program: str) -> dict[str, Any]:
    kind, name = PROGRAMS[program]["workload"]
    return one(objects, kind, name)["spec"]["template"]["spec"]


def _config(objects: list[dict[str, Any]], program: str) -> str:
    _, name = PROGRAMS[program]["workload"]
    return one(objects, "ConfigMap", name)["data"][PROGRAMS[program]["file"]]


def _env(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in pod["containers"][0]["env"]}


# ----------------------------------------------------------------------------- refused values

REFUSED = [
    ({"config": {"nats": {"password": SENTINEL}}}, "/config/nats/password", "nats.existingSecret"),
    ({"config": {"nats": {"token": SENTINEL}}}, "/config/nats/token", "nats.tokenSecret"),
    (
        {"config": {"nats": {"creds_file": SENTINEL}}},
        "/config/nats/creds_file",
        "nats.credentialsSecret",
    ),
    (
        {"config": {"nats": {"nkey_seed_file": SENTINEL}}},
        "/config/nats/nkey_seed_file",
        "nats.nkeySecret",
    ),
    (
        {"config": {"nats": {"tls": {"key_file": SENTINEL}}}},
        "/config/nats/tls/key_file",
        "nats.tlsSecret",
    ),
    ({"nats": {"password": SENTINEL}}, "additional properties 'password' not allowed", ""),
    (
        {"extraEnv": [{"name": "BRIDGE_NATS__PASSWORD", "value": SENTINEL}]},
        "/extraEnv/0/value",
        "valueFrom.secretKeyRef",
    ),
    (
        {"alerting": {"config": {"nats": {"password": SENTINEL}}}},
        "/alerting/config/nats/password",
        "alerting.nats.existingSecret",
    ),
    (
        {"alerting": {"config": {"nats": {"token": SENTINEL}}}},
        "/alerting/config/nats/token",
        "alerting.nats.tokenSecret",
    ),
    (
        {"alerting": {"config": {"alertmanager": {"password": SENTINEL}}}},
        "/alerting/config/alertmanager/password",
        "alerting.alertmanager.existingSecret",
    ),
    (
        {"alerting": {"config": {"alertmanager": {"bearer_token": SENTINEL}}}},
        "/alerting/config/alertmanager/bearer_token",
        "alerting.alertmanager.bearerTokenSecret",
    ),
    (
        {
            "alerting": {
                "extraEnv": [{"name": "ALERTING_ALERTMANAGER__PASSWORD", "value": SENTINEL}]
            }
        },
        "/alerting/extraEnv/0/value",
        "valueFrom.secretKeyRef",
    ),
    (
        {"remediation": {"config": {"nats": {"password": SENTINEL}}}},
        "/remediation/config/nats/password",
        "remediation.nats.existingSecret",
    ),
    (
        {"remediation": {"config": {"nats": {"token": SENTINEL}}}},
        "/remediation/config/nats/token",
        "remediation.nats.tokenSecret",
    ),
    (
        {"remediation": {"config": {"nats": {"creds_file": SENTINEL}}}},
        "/remediation/config/nats/creds_file",
        "remediation.nats.credentialsSecret",
    ),
    (
        {"remediation": {"extraEnv": [{"name": "REMEDIATION_NATS__TOKEN", "value": SENTINEL}]}},
        "/remediation/extraEnv/0/value",
        "valueFrom.secretKeyRef",
    ),
    (
        {"otlp": {"config": {"nats": {"password": SENTINEL}}}},
        "/otlp/config/nats/password",
        "otlp.nats.existingSecret",
    ),
    (
        {"otlp": {"config": {"otlp": {"headers": {"Authorization": SENTINEL}}}}},
        "/otlp/config/otlp/headers",
        "otlp.otlp.existingSecret",
    ),
    (
        {"otlp": {"config": {"otlp": {"tls": {"key_file": SENTINEL}}}}},
        "/otlp/config/otlp/tls/key_file",
        "otlp.otlp.tlsSecret",
    ),
    (
        {"otlp": {"extraEnv": [{"name": "OTLP_OTLP__HEADERS", "value": SENTINEL}]}},
        "/otlp/extraEnv/0/value",
        "valueFrom.secretKeyRef",
    ),
    (
        {"otlp": {"extraEnv": [{"name": "OTLP_OTLP__HEADERS__AUTHORIZATION", "value": SENTINEL}]}},
        "/otlp/extraEnv/0/value",
        "valueFrom.secretKeyRef",
    ),
]


@pytest.mark.parametrize(
    ("values", "where", "instead"),
    REFUSED,
    ids=[w.strip("/").replace("/", ".").split("'")[0] or "nats.password" for _, w, _ in REFUSED],
)
def test_a_plain_secret_in_the_values_is_refused_naming_the_key(
    tmp_path: Path, values: dict[str, Any], where: str, instead: str
) -> None:
    """``helm lint --strict`` and ``helm template`` fail, naming the key and the Secret value
    to use instead, and never show the value given."""
    values = _deep_merge(values, SUBSCRIBERS_ON)
    path = str(values_file(tmp_path, values))
    for args in (
        ["template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--values", path],
        ["lint", "--strict", str(CHART), "--namespace", NAMESPACE, "--values", path],
    ):
        done = helm(*args, check=False)
        out = done.stdout + done.stderr
        assert done.returncode != 0, out
        assert where in out, out
        assert instead in out, out
        assert SENTINEL not in out


# ----------------------------------------------------------------------------- mounted files


def _materialise(config_text: str, root: Path, program: str) -> Path:
    """The config as the Pod sees it, with the mounted files made real under ``root``: each
    path under MOUNTS gets a file of the kind its key wants."""
    config = yaml.safe_load(config_text.replace(MOUNTS, str(root)))
    files: list[tuple[str, str]] = []

    def walk(node: Any, key: str = "") -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, k)
        elif isinstance(node, str) and node.startswith(str(root)):
            files.append((key, node))

    walk(config)
    for key, path in files:
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        if key == "creds_file":
            creds.write_creds(p)
        elif key == "nkey_seed_file":
            creds.write_seed(p)
        else:
            p.write_text(f"-- {key} --\n")
    path = root / PROGRAMS[program]["file"]
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(("BRIDGE_", "ALERTING_", "REMEDIATION_", "OTLP_")):
            monkeypatch.delenv(name)


@pytest.mark.usefixtures("clean_env")
@pytest.mark.parametrize("auth", ["credentialsSecret", "nkeySecret"])
@pytest.mark.parametrize("program", list(PROGRAMS))
def test_secret_files_are_mounted_read_only_and_named_in_the_config(
    tmp_path: Path, program: str, auth: str
) -> None:
    """With a credentials (or seed) Secret, a TLS Secret (CA and client certificate) and a
    token Secret: each Secret is a volume, mode 0440, only the keys asked for, mounted
    read-only without subPath; the token comes by secretKeyRef; the config names exactly the
    mounted files, and loads in the program's own settings with them."""
    secrets = {
        auth: {"name": f"{program}-auth", "key": "the-key"},
        "tlsSecret": {"name": f"{program}-tls"},
        "tokenSecret": {"name": f"{program}-token", "key": "tok"},
    }
    values = _deep_merge(SUBSCRIBERS_ON, _at(PROGRAMS[program]["values"], secrets))
    objects = documents(chart_manifest(tmp_path, values))
    pod = _pod(objects, program)
    assert pod["securityContext"]["fsGroup"] == 65532

    volumes = {v["name"]: v for v in pod["volumes"] if "secret" in v}
    mounts = {m["name"]: m for m in pod["containers"][0]["volumeMounts"] if m["name"] in volumes}
    auth_file = {"credentialsSecret": "user.creds", "nkeySecret": "user.nk"}[auth]
    expected = {
        f"{program}-auth": [{"key": "the-key", "path": auth_file}],
        f"{program}-tls": [
            {"key": "ca.crt", "path": "ca.crt"},
            {"key": "tls.crt", "path": "tls.crt"},
            {"key": "tls.key", "path": "tls.key"},
        ],
    }
    assert {v["secret"]["secretName"]: v["secret"]["items"] for v in volumes.values()} == expected
    for name, volume in volumes.items():
        assert volume["secret"]["defaultMode"] == 0o440
        assert mounts[name]["readOnly"] is True
        assert "subPath" not in mounts[name]
        assert mounts[name]["mountPath"].startswith(MOUNTS + "/")
    mounted = {
        f"{mounts[n]['mountPath']}/{item['path']}"
        for n, v in volumes.items()
        for item in v["secret"]["items"]
    }

    token = _env(pod)[f"{PROGRAMS[program]['env']}NATS__TOKEN"]
    assert token == {
        "name": f"{PROGRAMS[program]['env']}NATS__TOKEN",
        "valueFrom": {"secretKeyRef": {"name": f"{program}-token", "key": "tok"}},
    }

    text = _config(objects, program)
    nats = yaml.safe_load(text)["nats"]
    key = {"credentialsSecret": "creds_file", "nkeySecret": "nkey_seed_file"}[auth]
    named = {nats[key], *nats["tls"].values()}
    assert named == mounted
    loaded = PROGRAMS[program]["load"](str(_materialise(text, tmp_path, program))).nats
    assert Path(getattr(loaded, key)).name == auth_file
    assert {Path(loaded.tls.ca_file).name, Path(loaded.tls.cert_file).name} == {"ca.crt", "tls.crt"}


@pytest.mark.usefixtures("clean_env")
def test_the_alertmanager_token_and_tls_files_are_mounted_and_named(tmp_path: Path) -> None:
    """alerting.alertmanager.bearerTokenSecret and .tlsSecret (a CA only): mounted like the
    NATS files, named as alertmanager.bearer_token_file and alertmanager.tls.ca_file; the
    Alertmanager password from its Secret, by secretKeyRef."""
    values = _deep_merge(
        SUBSCRIBERS_ON,
        {
            "alerting": {
                "alertmanager": {
                    "bearerTokenSecret": {"name": "am-token"},
                    "tlsSecret": {"name": "am-ca", "caKey": "ca.pem", "certKey": "", "keyKey": ""},
                }
            }
        },
    )
    objects = documents(chart_manifest(tmp_path, values))
    pod = _pod(objects, "alerting")
    volumes = {v["secret"]["secretName"]: v["secret"] for v in pod["volumes"] if "secret" in v}
    assert volumes == {
        "am-token": {
            "secretName": "am-token",
            "defaultMode": 0o440,
            "items": [{"key": "token", "path": "token"}],
        },
        "am-ca": {
            "secretName": "am-ca",
            "defaultMode": 0o440,
            "items": [{"key": "ca.pem", "path": "ca.crt"}],
        },
    }
    text = _config(objects, "alerting")
    am = yaml.safe_load(text)["alertmanager"]
    assert am["bearer_token_file"] == f"{MOUNTS}/alertmanager/token/token"
    assert am["tls"] == {"ca_file": f"{MOUNTS}/alertmanager/tls/ca.crt"}
    loaded = alerting_settings.load(str(_materialise(text, tmp_path, "alerting")))
    assert Path(loaded.alertmanager.bearer_token_file or "").read_text()
    password = _env(pod)["ALERTING_ALERTMANAGER__PASSWORD"]["valueFrom"]["secretKeyRef"]
    assert password == {
        "name": f"{RELEASE}-alerting",
        "key": "alertmanager-password",
        "optional": True,
    }


@pytest.mark.usefixtures("clean_env")
def test_the_otlp_endpoints_headers_and_tls_files_come_from_secrets(tmp_path: Path) -> None:
    """otlp.otlp.existingSecret (a Secret of yours: required) key otlp-headers, a JSON object,
    as OTLP_OTLP__HEADERS by secretKeyRef; otlp.otlp.tlsSecret (a CA and a client
    certificate) mounted like the NATS files and named as otlp.tls.*; the rendered config,
    with those files and the headers, loads in the subscriber's own settings."""
    values = _deep_merge(
        SUBSCRIBERS_ON,
        {
            "otlp": {
                "otlp": {
                    "existingSecret": "collector-auth",
                    "existingSecretKey": "headers.json",
                    "tlsSecret": {"name": "collector-tls"},
                }
            }
        },
    )
    objects = documents(chart_manifest(tmp_path, values))
    pod = _pod(objects, "otlp")
    assert _env(pod)["OTLP_OTLP__HEADERS"] == {
        "name": "OTLP_OTLP__HEADERS",
        "valueFrom": {"secretKeyRef": {"name": "collector-auth", "key": "headers.json"}},
    }
    volumes = {v["secret"]["secretName"]: v["secret"] for v in pod["volumes"] if "secret" in v}
    assert volumes == {
        "collector-tls": {
            "secretName": "collector-tls",
            "defaultMode": 0o440,
            "items": [
                {"key": "ca.crt", "path": "ca.crt"},
                {"key": "tls.crt", "path": "tls.crt"},
                {"key": "tls.key", "path": "tls.key"},
            ],
        }
    }
    (mount,) = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "otlp-tls"]
    assert mount == {"name": "otlp-tls", "mountPath": f"{MOUNTS}/otlp/tls", "readOnly": True}
    text = _config(objects, "otlp")
    assert yaml.safe_load(text)["otlp"]["tls"] == {
        "ca_file": f"{MOUNTS}/otlp/tls/ca.crt",
        "cert_file": f"{MOUNTS}/otlp/tls/tls.crt",
        "key_file": f"{MOUNTS}/otlp/tls/tls.key",
    }
    os.environ["OTLP_OTLP__HEADERS"] = '{"Authorization": "Bearer ' + SENTINEL + '"}'
    try:
        loaded = otlp_settings.load(str(_materialise(text, tmp_path, "otlp")))
    finally:
        del os.environ["OTLP_OTLP__HEADERS"]
    assert loaded.otlp.headers["Authorization"].get_secret_value() == f"Bearer {SENTINEL}"
    assert Path(loaded.otlp.tls.cert_file or "").name == "tls.crt"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"nats": {"credentialsSecret": {"name": "a"}, "nkeySecret": {"name": "b"}}},
            "nats.credentialsSecret and nats.nkeySecret are both set",
        ),
        (
            {"remediation": {"nats": {"tlsSecret": {"name": "t", "keyKey": ""}}}},
            "remediation.nats.tlsSecret: certKey and keyKey go together",
        ),
        (
            {
                "alerting": {
                    "alertmanager": {
                        "tlsSecret": {"name": "t", "caKey": "", "certKey": "", "keyKey": ""}
                    }
                }
            },
            "alerting.alertmanager.tlsSecret.name is set but no key is",
        ),
        (
            {"otlp": {"otlp": {"tlsSecret": {"name": "t", "certKey": ""}}}},
            "otlp.otlp.tlsSecret: certKey and keyKey go together",
        ),
        (
            {"podSecurityContext": {"fsGroup": None}, "nats": {"nkeySecret": {"name": "s"}}},
            "podSecurityContext.fsGroup is needed",
        ),
    ],
    ids=[
        "creds-and-seed",
        "cert-without-key",
        "tls-without-keys",
        "otlp-key-without-cert",
        "no-fs-group",
    ],
)
def test_a_secret_the_programs_could_not_use_fails_the_render(
    tmp_path: Path, values: dict[str, Any], message: str
) -> None:
    """What would stop a program at start (a .creds and a seed both; a client certificate
    without its key) or leave it unable to read its files (no fsGroup: the files are root's
    and the group's) fails ``helm template``, saying why."""
    path = str(values_file(tmp_path, _deep_merge(SUBSCRIBERS_ON, values)))
    done = helm(
        "template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--values", path, check=False
    )
    assert done.returncode != 0, done.stdout
    assert message in done.stderr


# ----------------------------------------------------------------------------- every secret

EVERY_SECRET = _deep_merge(
    SUBSCRIBERS_ON,
    {
        "nats": {
            "existingSecret": "bridge-nats",
            "tokenSecret": {"name": "bridge-token"},
            "credentialsSecret": {"name": "bridge-creds"},
            "tlsSecret": {"name": "bridge-tls"},
        },
        "alerting": {
            "nats": {
                "nkeySecret": {"name": "alerting-seed"},
                "tlsSecret": {"name": "alerting-tls"},
            },
            "alertmanager": {
                "existingSecret": "am-basic",
                "bearerTokenSecret": {"name": "am-token"},
                "tlsSecret": {"name": "am-tls"},
            },
        },
        "remediation": {
            "nats": {
                "credentialsSecret": {"name": "remediation-creds"},
                "tlsSecret": {"name": "remediation-tls", "certKey": "", "keyKey": ""},
            }
        },
        "otlp": {
            "nats": {
                "credentialsSecret": {"name": "otlp-creds"},
                "tlsSecret": {"name": "otlp-tls"},
            },
            "otlp": {"existingSecret": "collector-auth", "tlsSecret": {"name": "collector-tls"}},
        },
    },
)


def test_no_secret_value_in_what_the_chart_renders(tmp_path: Path) -> None:
    """With every secret set: no Secret object (the chart never holds one), every
    ``*__PASSWORD``, ``*__TOKEN`` and ``*__HEADERS`` variable from a secretKeyRef, and every
    config's secret keys unset."""
    objects = documents(chart_manifest(tmp_path, EVERY_SECRET))
    assert not [o for o in objects if o["kind"] == "Secret"]
    for program in PROGRAMS:
        env = _env(_pod(objects, program))
        secret_vars = [n for n in env if n.endswith(("__PASSWORD", "__TOKEN", "__HEADERS"))]
        assert secret_vars
        for name in secret_vars:
            assert set(env[name]) == {"name", "valueFrom"}
            assert set(env[name]["valueFrom"]) == {"secretKeyRef"}
        config = yaml.safe_load(_config(objects, program))
        assert not {"password", "token"} & set(config["nats"])
        assert not {"password", "bearer_token"} & set(config.get("alertmanager", {}))
        assert "headers" not in config.get("otlp", {})


@pytest.fixture
def api(chart_control_plane: ControlPlane) -> ControlPlane:
    """The chart tests' control plane (conftest.py: NAMESPACE and ACT_IN exist)."""
    assert NAMESPACE == "k8s-event-bridge" and ACT_IN == ["team-a", "team-b"]
    return chart_control_plane


@pytest.mark.e2e
def test_the_chart_with_every_secret_mounted_is_accepted_by_the_api_server(
    api: ControlPlane, tmp_path: Path
) -> None:
    """What the chart renders with every Secret of the four programs passes a server-side
    dry run (strict field validation): the API server's own validation of the secret
    volumes, their modes and items, and the secretKeyRefs."""
    manifest = chart_manifest(tmp_path, EVERY_SECRET)
    accepted = server_dry_run(api, "-f", "-", manifest=manifest)
    for program in PROGRAMS:
        kind, name = PROGRAMS[program]["workload"]
        assert f"{kind.lower()}.apps/{name}" in accepted
