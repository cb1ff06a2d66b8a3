"""The node tier's installs as session fixtures, one each per session whichever test module asks
first: a module that uses them registers this one (``pytest_plugins = ["tests.node.installs"]``;
it is never imported otherwise, so pytest may rewrite its asserts). What they do is
tests/node/workloads.py's.

- ``chart_release``: the chart as docs/deploy.md's ``helm install`` installs it. The first test of
  the tier asks for it (tests/node/test_chart.py sorts first) and tests/node/test_token.py, which
  sorts last, checks it once its first token expired: the longest wait of the tier overlaps
  everything else.
- ``deployed``: deploy/ with its NATS, the truth of the cluster's Events recorded from the moment
  its leader was ready.
- ``cluster_events``: what makes the cluster write Warnings, started after ``deployed`` and left
  running (the remediation worker acts on it later).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.node import workloads
from tests.node.workloads import ClusterEvents, Deployed, Release


@pytest.fixture(scope="session")
def chart_release(node: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Release]:
    page = workloads.REPO / "docs" / "deploy.md"
    with workloads.installed(node, tmp_path_factory.mktemp("chart-docs"), page, "docs") as r:
        yield r


@pytest.fixture(scope="session")
def deployed(node: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployed]:
    with workloads.deploy(node, tmp_path_factory.mktemp("deploy")) as d:
        yield d


@pytest.fixture(scope="session")
def cluster_events(node: Any, deployed: Deployed) -> Iterator[ClusterEvents]:
    with workloads.warnings_of_the_cluster(node) as events:
        yield events
