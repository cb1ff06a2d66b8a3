"""tools/image.py's pure parts, without Docker: which base it builds on, where it saves it.
tests/node/test_image.py runs the rest on a real engine; tests/unit/test_image_layers.py
reads saved images."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.image import BaseChoice, ImageError, archive_name, choose_base, official_base

ROOT = Path(__file__).resolve().parents[2]
OFFICIAL = "python:3.11-slim"


# --- the base -------------------------------------------------------------------------------


def test_the_official_base_is_the_dockerfile_s_default() -> None:
    assert official_base((ROOT / "Dockerfile").read_text()) == OFFICIAL
    assert official_base("# c\nARG BASE=x:1\nFROM ${BASE}\nARG BASE=y:2\n") == "x:1"
    with pytest.raises(ImageError):
        official_base("FROM python:3.11-slim\nARG BASE=x\n")  # after FROM: not a FROM's


def _never(ref: str) -> str | None:
    raise AssertionError(f"{ref} pulled")


@pytest.mark.parametrize(
    ("override", "present", "pulled", "expected"),
    [
        ("standin", True, None, BaseChoice(None, "K8S_EVENT_BRIDGE_IMAGE_BASE=standin")),
        ("mirror/python:3.11-slim", False, None,
         BaseChoice("mirror/python:3.11-slim",
                    "K8S_EVENT_BRIDGE_IMAGE_BASE=mirror/python:3.11-slim")),
        (None, True, None, BaseChoice(OFFICIAL, "the engine has it")),
        (None, False, None, BaseChoice(OFFICIAL, "pulled")),
        (None, False, "no such host",
         BaseChoice(None, f"{OFFICIAL} could not be pulled (no such host)")),
    ],
    ids=["override-standin", "override-tag", "present", "pulled", "unreachable"],
)  # fmt: skip
def test_the_base_is_the_official_one_unless_it_cannot_be_had(
    override: str | None, present: bool, pulled: str | None, expected: BaseChoice
) -> None:
    asked: list[str] = []

    def pull(ref: str) -> str | None:
        asked.append(ref)
        return pulled

    choice = choose_base(OFFICIAL, override=override, present=lambda _: present, pull=pull)
    assert choice == expected
    assert choice.standin is (expected.base is None)
    # a pull is tried only when nothing decided before it
    assert asked == ([OFFICIAL] if override is None and not present else [])


def test_an_archive_is_named_after_its_tag_its_image_and_says_stand_in() -> None:
    image_id = "sha256:" + "0123456789ab" + "f" * 52
    assert archive_name("k8s-event-bridge:test", True, image_id) == (
        "k8s-event-bridge-test-standin-0123456789ab.tar"
    )
    assert archive_name("k8s-event-bridge:test", False, image_id) == (
        "k8s-event-bridge-test-0123456789ab.tar"
    )
    assert archive_name("a/b:c", False, image_id) == "a-b-c-0123456789ab.tar"
