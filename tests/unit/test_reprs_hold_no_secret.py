"""No repr and no str holds a secret: every settings and credentials class of the shared package,
the bridge and the subscribers, built with sentinel secrets (a NATS password and token, a .creds
file's seed and JWT, an NKey seed, an Alertmanager password and bearer token, an OTLP endpoint's
headers). A repr ends up in a traceback, a debugger, an ``%r`` in a log line."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from k8s_event_common import configuring, connecting, credentials, options
from tests.creds import write_creds, write_seed

PASSWORD = "Sentinel-Repr-Pw-0a91"
TOKEN = "Sentinel-Repr-Token-4c2e"
AM_PASSWORD = "Sentinel-Repr-AmPw-77b1"
AM_TOKEN = "Sentinel-Repr-AmTok-19e3"
OTLP_TOKEN = "Sentinel-Repr-OtlpTok-5d08"


def _texts(obj: Any) -> str:
    return repr(obj) + "\n" + str(obj)


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Any]:
    creds, creds_seed = write_creds(tmp_path / "svc.creds")
    jwt = creds.read_text().split("-----BEGIN NATS USER JWT-----\n")[1].split("\n")[0]
    seed_path, seed = write_seed(tmp_path / "svc.nk")
    return {
        "creds": str(creds),
        "seed_path": str(seed_path),
        "secrets": [
            PASSWORD,
            TOKEN,
            AM_PASSWORD,
            AM_TOKEN,
            OTLP_TOKEN,
            creds_seed.decode(),
            seed.decode(),
            jwt,
        ],
    }


def _leaks(text: str, secrets: list[str]) -> list[str]:
    # a part of a secret counts too: a repr may cut it
    return [s for s in secrets if s[:16] in text]


def _config(tmp_path: Path, name: str, doc: dict[str, Any]) -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def _objects(tmp_path: Path, files: dict[str, Any]) -> dict[str, Callable[[], Any]]:
    from bridge import settings as bridge_settings
    from k8s_event_consumer.alerting import alertmanager
    from k8s_event_consumer.alerting import settings as alerting_settings
    from k8s_event_consumer.connecting import NatsOptions as SubscriberNatsOptions
    from k8s_event_consumer.otlp import running as otlp_running
    from k8s_event_consumer.otlp import settings as otlp_settings
    from k8s_event_consumer.remediation import settings as remediation_settings

    nats_pw = {"servers": ["nats://127.0.0.1:4222"], "user": "svc", "password": PASSWORD}
    nats_token = {"servers": ["nats://127.0.0.1:4222"], "token": TOKEN}
    kube = tmp_path / "kubeconfig"
    kube.write_text("apiVersion: v1\nkind: Config\n")

    def signer() -> credentials.Signer:
        return credentials.Signer(files["creds"], lambda problem: None)

    def connection(**kw: Any) -> connecting.Connection:
        return connecting.Connection(options.NatsOptions(**kw), logger="test.repr")

    def otlp() -> Any:
        return otlp_settings.load(
            _config(
                tmp_path,
                "otlp",
                {"nats": nats_pw, "otlp": {"headers": {"Authorization": f"Bearer {OTLP_TOKEN}"}}},
            )
        )

    return {
        "UserCreds": lambda: credentials.check_creds_file(files["creds"]),
        "Signer": signer,
        "NatsOptions(password)": lambda: options.NatsOptions(user="svc", password=PASSWORD),
        "NatsOptions(token)": lambda: options.NatsOptions(token=TOKEN),
        "subscriber NatsOptions": lambda: SubscriberNatsOptions(user="s", password=PASSWORD),
        "NatsConnection(password)": lambda: configuring.NatsConnection(**nats_pw),
        "NatsConnection(token)": lambda: configuring.NatsConnection(**nats_token),
        "NatsConnection.options()": lambda: configuring.NatsConnection(**nats_pw).options(),
        "Connection(password)": lambda: connection(user="svc", password=PASSWORD),
        "Connection(creds)": lambda: connection(creds_file=files["creds"]),
        "Connection(nkey)": lambda: connection(nkey_seed_file=files["seed_path"]),
        "alertmanager.Auth(basic)": lambda: alertmanager.Auth(user="am", password=AM_PASSWORD),
        "alertmanager.Auth(bearer)": lambda: alertmanager.Auth(bearer_token=AM_TOKEN),
        "bridge Settings": lambda: bridge_settings.load(
            _config(
                tmp_path,
                "bridge",
                {
                    "cluster": {"name": "test"},
                    "kubernetes": {"kubeconfig": str(kube)},
                    "nats": nats_pw,
                },
            )
        ),
        "alerting Settings": lambda: alerting_settings.load(
            _config(
                tmp_path,
                "alerting",
                {
                    "nats": nats_token,
                    "alertmanager": {
                        "urls": ["http://127.0.0.1:9093"],
                        "user": "am",
                        "password": AM_PASSWORD,
                    },
                },
            )
        ),
        "alerting Settings(bearer)": lambda: alerting_settings.load(
            _config(
                tmp_path,
                "alerting-bearer",
                {
                    "nats": nats_pw,
                    "alertmanager": {"urls": ["http://127.0.0.1:9093"], "bearer_token": AM_TOKEN},
                },
            )
        ),
        "remediation Settings": lambda: remediation_settings.load(
            _config(
                tmp_path,
                "remediation",
                {
                    "nats": {**nats_pw, "creds_file": None},
                    "kubernetes": {"kubeconfig": str(kube), "cluster": "test"},
                },
            )
        ),
        "remediation Settings(creds)": lambda: remediation_settings.load(
            _config(
                tmp_path,
                "remediation-creds",
                {
                    "nats": {"servers": ["nats://127.0.0.1:4222"], "creds_file": files["creds"]},
                    "kubernetes": {"kubeconfig": str(kube), "cluster": "test"},
                },
            )
        ),
        "otlp Settings": otlp,
        "otlp sender.Client": lambda: otlp_running.client(otlp()),
    }


NAMES = [
    "UserCreds",
    "Signer",
    "NatsOptions(password)",
    "NatsOptions(token)",
    "subscriber NatsOptions",
    "NatsConnection(password)",
    "NatsConnection(token)",
    "NatsConnection.options()",
    "Connection(password)",
    "Connection(creds)",
    "Connection(nkey)",
    "alertmanager.Auth(basic)",
    "alertmanager.Auth(bearer)",
    "bridge Settings",
    "alerting Settings",
    "alerting Settings(bearer)",
    "remediation Settings",
    "remediation Settings(creds)",
    "otlp Settings",
    "otlp sender.Client",
]


@pytest.mark.parametrize("name", NAMES)
def test_no_repr_or_str_holds_a_secret(
    tmp_path: Path, files: dict[str, Any], name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in list(__import__("os").environ):
        if key.startswith(("BRIDGE_", "ALERTING_", "REMEDIATION_", "OTLP_")):
            monkeypatch.delenv(key)
    obj = _objects(tmp_path, files)[name]()
    texts = [_texts(obj)]
    # and each object it holds, one level down (a settings section, the creds a signer holds;
    # a secret's own value is not a repr)
    parts = list(getattr(obj, "__dict__", {}).values())
    parts += [getattr(obj, f) for f in getattr(type(obj), "model_fields", {})]
    for value in parts:
        if not isinstance(value, (str, bytes, int, float, list, dict, type(None))):
            texts.append(_texts(value))
    text = "\n".join(texts)
    assert not _leaks(text, files["secrets"]), text[:3000]


def test_the_table_builds_each_object(tmp_path: Path, files: dict[str, Any]) -> None:
    assert sorted(_objects(tmp_path, files)) == sorted(NAMES)
