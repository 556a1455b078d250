"""``[http] require_auth``: the admin endpoints are checked by the bookie's ``[auth]`` provider."""

from __future__ import annotations

from pathlib import Path

from bkframe.testing.cluster import BookieProcess
from tests.admin.helpers import fetch


async def test_admin_endpoints_need_the_bookie_token(tmp_path: Path, bookie_processes: list[BookieProcess]) -> None:
    config = tmp_path / "bookie.toml"
    config.write_text('[auth]\nprovider = "token"\ntokens = ["admin-s3cret"]\n\n[http]\nrequire_auth = true\n')
    b = BookieProcess(tmp_path / "b0", bookie_id="b0", args=("--http-port", "0", "--config", str(config)))
    bookie_processes.append(b)
    b.start()
    url = b.http_url

    # Liveness stays open; everything else needs the token.
    assert await fetch(url + "/heartbeat") == (200, "OK\n")
    for path in ("/api/v1/bookie/info", "/metrics", "/", "/api/v1/config/server_config"):
        status, body = await fetch(url + path)
        assert status == 401 and "no token given" in body and "Authorization: Bearer" in body, (path, body)
    status, body = await fetch(url + "/api/v1/bookie/info", headers={"Authorization": "Bearer wrong"})
    assert status == 401 and "not accepted" in body and "admin-s3cret" not in body
    status, body = await fetch(url + "/api/v1/bookie/info", headers={"Authorization": "Bearer admin-s3cret"})
    assert status == 200 and '"bookie_id":"b0"' in body.replace(" ", "")
    status, body = await fetch(url + "/metrics", headers={"Authorization": "token admin-s3cret"})
    assert status == 200 and "bkframe" in body
