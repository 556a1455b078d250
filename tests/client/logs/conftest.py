"""One cluster of three real bookie processes per metadata store (sqlite, ZooKeeper, etcd),
shared by the tests of a module: each test uses logs of its own names."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from bkframe.testing.cluster import Cluster


@pytest.fixture(scope="module", params=["sqlite", "zookeeper", "etcd"])
def log_cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp(f"logs-{request.param}")
    prefix = f"logs-{uuid.uuid4().hex[:10]}"
    if request.param == "sqlite":
        uri = None
    elif request.param == "zookeeper":
        uri = f"zk://{request.getfixturevalue('zk_server').address}/{prefix}"
    else:
        uri = f"etcd://{request.getfixturevalue('etcd_server').address}/{prefix}"
    cluster = Cluster(root, 3, uri).start()
    yield cluster
    cluster.close()
