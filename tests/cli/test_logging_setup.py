"""The one logging setup of the bookie and the CLI: level and text or JSON lines."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from bkframe.cli.logging_setup import setup_logging
from bkframe.core.config import LoggingConfig


@pytest.fixture
def restore_root_logger() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def test_json_lines_carry_level_logger_message_and_exception(restore_root_logger: None) -> None:
    out = io.StringIO()
    setup_logging(LoggingConfig(level="debug", format="json"), stream=out)
    log = logging.getLogger("bkframe.test")
    log.debug("request %d", 7)
    try:
        raise ValueError("boom")
    except ValueError:
        log.exception("failed")
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [(r["level"], r["logger"], r["message"]) for r in lines] == [
        ("DEBUG", "bkframe.test", "request 7"),
        ("ERROR", "bkframe.test", "failed"),
    ]
    assert "ValueError: boom" in lines[1]["exception"]


def test_level_filters_and_an_override_wins(restore_root_logger: None) -> None:
    out = io.StringIO()
    setup_logging(LoggingConfig(level="warning"), stream=out)
    logging.getLogger("bkframe.test").info("hidden")
    logging.getLogger("bkframe.test").warning("shown")
    assert "hidden" not in out.getvalue() and " WARNING bkframe.test: shown" in out.getvalue()
    setup_logging(LoggingConfig(level="warning"), level=logging.DEBUG, stream=out)
    logging.getLogger("bkframe.test").debug("now shown")
    assert "now shown" in out.getvalue()
