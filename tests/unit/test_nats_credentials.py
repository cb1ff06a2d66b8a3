"""Credential files and secrets in the configuration, refused at load: an exit 2 that names the
key, never a traceback, a hang, or a byte of the secret. The same checks for the bridge and both
subscribers (one copy: k8s_event_common)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import nkeys
import pytest

from bridge import cli
from k8s_event_common.credentials import CredentialError, Signer, check_creds_file, check_seed_file
from k8s_event_common.options import redact_url, url_problem
from k8s_event_common.secrets import never_echo
from k8s_event_consumer.alerting import __main__ as alerting_main
from k8s_event_consumer.otlp import __main__ as otlp_main
from k8s_event_consumer.remediation import __main__ as remediation_main
from tests.creds import creds_text, public, seed, user_jwt, write_creds, write_seed

# --- the files themselves -------------------------------------------------------------------


def test_a_creds_file_as_nsc_writes_it_is_read_with_its_user_and_expiry(tmp_path: Path) -> None:
    path, s = write_creds(tmp_path / "bridge.creds", expires=time.time() - 5)
    creds = check_creds_file(str(path))
    assert creds.public_key == public(s)
    assert creds.seed == s
    assert creds.name == "bridge"
    assert creds.expired()


def _broken(tmp_path: Path, case: str) -> tuple[Path, list[str]]:
    """A broken .creds file and the secrets it holds."""
    s = seed()
    other = seed()
    texts = {
        "no-jwt": creds_text(None, s),
        "no-seed": creds_text(user_jwt(public(s)), None),
        "jwt-of-another-user": creds_text(user_jwt(public(other)), s),
        "account-jwt": creds_text(user_jwt(public(s), kind="account"), s),
        "account-seed": creds_text(user_jwt(public(s)), seed(nkeys.PREFIX_BYTE_ACCOUNT)),
        "garbage-seed": creds_text(user_jwt(public(s)), b"SUAGARBAGEGARBAGE"),
        "garbage-jwt": creds_text("not.a-jwt", s),
        "empty": "",
    }
    path = tmp_path / f"{case}.creds"
    path.write_text(texts[case])
    return path, [s.decode(), other.decode()]


@pytest.mark.parametrize(
    ("case", "says"),
    [
        ("no-jwt", "holds no user JWT"),
        ("no-seed", "holds no user seed"),
        ("jwt-of-another-user", "from different users"),
        ("account-jwt", "an account JWT"),
        ("account-seed", "an account seed"),
        ("garbage-seed", "not a valid NKey seed"),
        ("garbage-jwt", "not a JWT"),
        ("empty", "holds no user JWT"),
    ],
)
def test_a_broken_creds_file_is_refused_naming_what_is_wrong_and_no_secret(
    tmp_path: Path, case: str, says: str
) -> None:
    path, secrets = _broken(tmp_path, case)
    with pytest.raises(CredentialError) as err:
        check_creds_file(str(path))
    assert says in str(err.value)
    for secret in secrets:
        assert secret not in str(err.value)


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda p: write_seed(p), None),
        (lambda p: write_seed(p, nkeys.PREFIX_BYTE_ACCOUNT), "an account seed"),
        (lambda p: write_seed(p, nkeys.PREFIX_BYTE_OPERATOR), "an operator seed"),
        (
            lambda p: p.write_text("SUAxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"),
            "not a valid NKey seed",
        ),
        (lambda p: p.write_text("hunter2"), "not an NKey seed"),
        (lambda p: p.write_bytes(b"\xff\xfe\x00"), "not a text file"),
        (lambda p: write_creds(p), "holds a .creds file"),
        (lambda p: p.mkdir(), "is a directory"),
        (lambda p: None, "no such file"),
    ],
    ids=[
        "user",
        "account",
        "operator",
        "bad-checksum",
        "not-a-seed",
        "binary",
        "creds",
        "dir",
        "missing",
    ],
)
def test_a_seed_file_must_hold_a_user_seed(tmp_path: Path, make, says: str | None) -> None:
    path = tmp_path / "seed.nk"
    make(path)
    if says is None:
        s, pub = check_seed_file(str(path))
        assert pub == public(s) and pub.startswith("U")
        return
    with pytest.raises(CredentialError) as err:
        check_seed_file(str(path))
    assert says in str(err.value)
    if path.is_file():
        text = path.read_bytes().decode(errors="replace").strip()
        if text:
            assert text not in str(err.value)


def test_a_creds_file_replaced_on_disk_is_used_at_the_next_connect(tmp_path: Path) -> None:
    path, first = write_creds(tmp_path / "bridge.creds")
    told: list[str] = []
    signer = Signer(str(path), told.append)
    nonce = "bm9uY2U"

    def signed_by(s: bytes) -> bool:
        sig = signer.sign(nonce)
        kp = nkeys.from_seed(bytearray(s))
        import base64

        return bool(kp.verify(nonce.encode(), base64.b64decode(sig)))

    assert signed_by(first)
    assert user_jwt_sub(signer.user_jwt()) == public(first)
    # rotated: a new user's file, written as a Secret volume swaps it (a rename)
    tmp = tmp_path / "new.creds"
    _, second = write_creds(tmp)
    os.replace(tmp, path)
    assert signed_by(second)
    assert user_jwt_sub(signer.user_jwt()) == public(second)
    # broken meanwhile: said once, the last good one goes on being used
    path.write_text(creds_text(None, seed()))
    assert signed_by(second) and signed_by(second)
    assert len(told) == 1 and "holds no user JWT" in told[0]
    assert second.decode() not in told[0]


def user_jwt_sub(jwt: bytes) -> str:
    import base64
    import json

    body = jwt.decode().split(".")[1]
    return str(json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))["sub"])


# --- URLs and keys --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    ["nats://alice:s3cret-pw@nats:4222", "tls://t0ken-value@nats:4222", "ws://u:p@h:80"],
)
def test_a_server_url_with_a_secret_is_refused_without_showing_it(url: str) -> None:
    problem = url_problem(url)
    assert problem is not None and "holds a user name, password or token" in problem
    assert "s3cret" not in problem and "t0ken" not in problem and "u:p" not in problem
    assert "***@" in redact_url(url)


@pytest.mark.parametrize(
    ("key", "hidden"),
    [
        ("nats.password", True),
        ("nats.token", True),
        ("alertmanager.bearer_token", True),
        ("nats.nkey_seed_file", True),
        ("nats.tls.key_file", True),
        ("nats.servers", False),
        ("nats.user", False),
    ],
)
def test_secrets_and_file_keys_are_never_echoed(key: str, hidden: bool) -> None:
    assert never_echo(key) is hidden


# --- each program: exit 2 naming the key, no traceback, no secret ---------------------------

PROGRAMS = {
    "bridge": (cli.main, "BRIDGE_"),
    "alerting": (alerting_main.main, "ALERTING_"),
    "remediation": (remediation_main.main, "REMEDIATION_"),
    "otlp": (otlp_main.main, "OTLP_"),
}


def _bad_setups(tmp_path: Path) -> dict[str, tuple[dict[str, str], str, list[str]]]:
    """Each bad setup: its NATS__ environment, the key the error must name, the secrets it
    must not show."""
    out: dict[str, tuple[dict[str, str], str, list[str]]] = {}
    for case in ("no-jwt", "no-seed", "jwt-of-another-user", "garbage-seed", "account-seed"):
        path, secrets = _broken(tmp_path, case)
        out[f"creds-{case}"] = ({"CREDS_FILE": str(path)}, "nats.creds_file", secrets)
    acc, acc_seed = write_seed(tmp_path / "account.nk", nkeys.PREFIX_BYTE_ACCOUNT)
    out["seed-account"] = ({"NKEY_SEED_FILE": str(acc)}, "nats.nkey_seed_file", [acc_seed.decode()])
    pasted = seed().decode()
    out["seed-pasted"] = ({"NKEY_SEED_FILE": pasted}, "nats.nkey_seed_file", [pasted])
    out["seed-dir"] = ({"NKEY_SEED_FILE": str(tmp_path)}, "nats.nkey_seed_file", [])
    good_creds, s1 = write_creds(tmp_path / "good.creds")
    good_seed, s2 = write_seed(tmp_path / "good.nk")
    out["both"] = (
        {"CREDS_FILE": str(good_creds), "NKEY_SEED_FILE": str(good_seed)},
        "creds_file and nkey_seed_file are both set",
        [s1.decode(), s2.decode()],
    )
    out["url-userinfo"] = (
        {"SERVERS": '["nats://alice:Sentinel-Pw-1@nats:4222"]'},
        "nats.servers",
        ["Sentinel-Pw-1"],
    )
    return out


SETUPS = [
    "creds-no-jwt",
    "creds-no-seed",
    "creds-jwt-of-another-user",
    "creds-garbage-seed",
    "creds-account-seed",
    "seed-account",
    "seed-pasted",
    "seed-dir",
    "both",
    "url-userinfo",
]


@pytest.mark.parametrize("setup", SETUPS)
@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_check_config_refuses_bad_credentials_with_exit_2(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    program: str,
    setup: str,
) -> None:
    main, prefix = PROGRAMS[program]
    env, key, secrets = _bad_setups(tmp_path)[setup]
    for name in list(os.environ):
        if name.startswith(prefix):
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(f"{prefix}NATS__{name}", value)
    if program == "remediation":
        monkeypatch.setenv("REMEDIATION_KUBERNETES__CLUSTER", "check")
    assert main(["check-config"]) == 2
    out = capsys.readouterr()
    assert key in out.err, out.err
    assert "Traceback" not in out.err + out.out
    for secret in secrets:
        assert secret not in out.err + out.out


@pytest.mark.parametrize(
    "program", ["k8s-event-bridge", "k8s-event-alerting", "k8s-event-remediation", "k8s-event-otlp"]
)
@pytest.mark.processes  # runs a program (tests/unit/conftest.py)
def test_run_with_a_creds_file_without_a_jwt_exits_2_at_once(tmp_path: Path, program: str) -> None:
    """nats-py's own reader loops for ever on a seed block without a JWT block (the event loop
    blocked, no probe answered): the file is refused before it is ever handed to nats-py."""
    path, secrets = _broken(tmp_path, "no-jwt")
    prefix = {
        "k8s-event-bridge": "BRIDGE_",
        "k8s-event-alerting": "ALERTING_",
        "k8s-event-remediation": "REMEDIATION_",
        "k8s-event-otlp": "OTLP_",
    }[program]
    env = {k: v for k, v in os.environ.items() if not k.startswith(prefix)}
    env[f"{prefix}NATS__CREDS_FILE"] = str(path)
    if prefix == "REMEDIATION_":
        env["REMEDIATION_KUBERNETES__CLUSTER"] = "test"
    exe = Path(sys.executable).parent / program
    t = time.monotonic()
    done = subprocess.run(
        [str(exe), "run"], capture_output=True, text=True, env=env, timeout=60, check=False
    )
    took = time.monotonic() - t
    assert done.returncode == 2, done.stderr
    assert "nats.creds_file" in done.stderr and "holds no user JWT" in done.stderr
    assert "Traceback" not in done.stderr
    assert all(s not in done.stderr + done.stdout for s in secrets)
    print(f"\n{program} run: exit 2 in {took:.1f}s")


@pytest.mark.parametrize(
    ("program", "section"),
    [("k8s-event-alerting", "ALERTMANAGER"), ("k8s-event-otlp", "OTLP")],
)
@pytest.mark.parametrize("bad", ["ca_file", "cert_file"])
@pytest.mark.processes  # runs a program (tests/unit/conftest.py)
def test_run_with_a_broken_tls_file_for_its_endpoint_exits_2_naming_it(
    tmp_path: Path, program: str, section: str, bad: str
) -> None:
    """The subscribers' HTTP clients (Alertmanager's, the OTLP endpoint's) load their TLS files
    as NATS's are loaded (``client_tls_context``): a file that is no PEM of its kind is a config
    error naming the key, exit 2, never a traceback."""
    junk = tmp_path / "junk.pem"
    junk.write_text("not a PEM block\n")
    prefix = {"k8s-event-alerting": "ALERTING_", "k8s-event-otlp": "OTLP_"}[program]
    env = {k: v for k, v in os.environ.items() if not k.startswith(prefix)}
    env[f"{prefix}NATS__SERVERS"] = '["nats://127.0.0.1:1"]'
    where = f"{prefix}{section}__"
    if section == "ALERTMANAGER":
        env[f"{where}URLS"] = '["https://127.0.0.1:1"]'
    else:
        env[f"{where}ENDPOINT"] = "https://127.0.0.1:1"
    files = {"ca_file": junk, "cert_file": junk, "key_file": junk}
    for key in ("ca_file",) if bad == "ca_file" else ("cert_file", "key_file"):
        env[f"{where}TLS__{key.upper()}"] = str(files[key])
    exe = Path(sys.executable).parent / program
    done = subprocess.run(
        [str(exe), "run"], capture_output=True, text=True, env=env, timeout=60, check=False
    )
    assert done.returncode == 2, done.stderr
    named = f"{section.lower()}.tls.{bad}"
    assert "config_error" in done.stderr and named in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
