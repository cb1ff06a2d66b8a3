"""The shared connection's uses of nats-py's private parts (k8s_event_common.connecting
PRIVATE_USES) are checked before they are installed: on the pinned nats-py every one is there;
on one that lacks a part, a connection that wants TLS without handshake_first is refused
(there is no other way to keep CONNECT off a plaintext socket), and any other runs as plain
nats-py with one warning."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from nats.aio.client import Client as NATS

from k8s_event_common import connecting
from k8s_event_common.connecting import Connection, TLSGuardUnavailable, problems
from k8s_event_common.options import NatsOptions


def test_every_private_part_is_there_on_the_pinned_nats_py() -> None:
    assert problems(NATS()) == []


class Renamed(NATS):  # type: ignore[misc]
    """A nats-py whose CONNECT builder moved and whose -ERR handler takes other arguments."""

    _connect_command = None

    async def _process_err(self, message: str, fatal: bool = True) -> None:  # type: ignore[override]
        return None


def test_a_missing_or_changed_part_is_named() -> None:
    found = problems(Renamed())
    assert "Client._connect_command is not a method" in found
    assert "Client._process_err(message, fatal) is not (err_msg)" in found


@pytest.fixture
def renamed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(connecting, "NATS", Renamed)


@pytest.mark.usefixtures("renamed")
def test_tls_wanted_without_the_guard_is_refused() -> None:
    with pytest.raises(TLSGuardUnavailable, match="handshake_first"):
        Connection(NatsOptions(servers=["tls://nats:4222"]), logger="test.nats")


@pytest.mark.usefixtures("renamed")
def test_tls_first_or_no_tls_go_on_without_the_guards_with_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="test.nats"):
        first = Connection(
            NatsOptions(servers=["tls://nats:4222"], tls_handshake_first=True), logger="test.nats"
        )
        plain = Connection(NatsOptions(servers=["nats://nats:4222"]), logger="test.nats")
    off: list[Any] = [r for r in caplog.records if r.getMessage() == "nats_guard_off"]
    assert len(off) == 2
    assert "Client._connect_command is not a method" in off[0].fields["reason"]
    assert first.kwargs()["tls_handshake_first"] is True
    assert "tls" not in plain.kwargs()


def test_the_guards_stand_in_for_the_clients_own_methods() -> None:
    conn = Connection(NatsOptions(servers=["nats://nats:4222"]), logger="test.nats")
    nc: Any = conn.nc
    assert nc._connect_command.__name__ == "connect_command"
    assert nc._process_err.__name__ == "process_err_guarded"
    assert nc._connect_to_server.__name__ == "connect_to_server_guarded"
    assert problems(nc) == []  # the guards keep the parts' shapes


def test_options_print_no_secret() -> None:
    text = repr(NatsOptions(user="u", password="pw-Sentinel", token="tok-Sentinel"))
    assert "pw-Sentinel" not in text and "tok-Sentinel" not in text


@pytest.mark.processes  # runs a program (tests/unit/conftest.py)
def test_nkeys_is_loaded_only_by_those_who_use_nkeys() -> None:
    """PyNaCl, under nkeys, costs 2.3 MB resident: the bridge and the subscribers load it only
    to read an NKey seed or a .creds file."""
    import subprocess
    import sys

    code = (
        "import sys, bridge.app, bridge.cli, k8s_event_consumer.alerting.running, "
        "k8s_event_consumer.remediation.__main__\n"
        "from bridge import settings\n"
        "settings.load(None)\n"
        "assert 'nkeys' not in sys.modules and 'nacl' not in sys.modules, 'loaded'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
