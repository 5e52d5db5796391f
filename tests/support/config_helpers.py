"""What the shared.config tests share: the one-sentence check every config error must pass, and a helper that
parses a bad config and returns its (checked) message."""

from __future__ import annotations

import re
from typing import Any

import pytest

from shared.config import ConfigError, parse_config


def assert_one_sentence(message: str) -> None:
    """One line, one full stop at the end, no second sentence starting inside (quoted values aside)."""
    assert "\n" not in message
    assert message.endswith(".")
    assert not message.endswith("..")
    unquoted = re.sub(r"'[^']*'|\"[^\"]*\"", "''", message)
    assert re.search(r"[.!?]\s+[A-Z]", unquoted) is None, message


def error(data: Any = None, env: dict[str, str] | None = None) -> str:
    """The message a bad config fails with, already checked to be one sentence, for tests to compare."""
    with pytest.raises(ConfigError) as e:
        parse_config(data, env or {})
    message = str(e.value)
    assert_one_sentence(message)
    return message
