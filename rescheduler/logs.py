"""Structured logs: one JSON object per line on stderr, so a log pipeline can filter by node, pod or reason.

A log call passes its structured part as ``extra={"fields": {...}}``; :func:`fields` spells that shorter.
``--log-format text`` gives the same records as readable lines for a person at a terminal.
"""

from __future__ import annotations

import datetime
import logging
import sys
from typing import Any

import orjson

__all__ = ["JsonFormatter", "TextFormatter", "setup_logging", "fields"]


def fields(**values: Any) -> dict[str, Any]:
    """``log.info("...", extra=fields(node=name))``: the structured part of a record."""
    return {"fields": values}


class JsonFormatter(logging.Formatter):
    """``{"ts", "level", "logger", "msg", ...fields}``; exceptions as a ``error`` string, never multi-line."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        extra = getattr(record, "fields", None)
        if isinstance(extra, dict):
            for k, v in extra.items():
                out.setdefault(k, v)
        if record.exc_info:
            out["error"] = self.formatException(record.exc_info)
        return orjson.dumps(out, default=str).decode()


class TextFormatter(logging.Formatter):
    """``time level message key=value ...``."""

    def format(self, record: logging.LogRecord) -> str:
        ts = datetime.datetime.fromtimestamp(record.created).strftime("%H:%M:%S")
        extra = getattr(record, "fields", None)
        tail = ""
        if isinstance(extra, dict) and extra:
            tail = " " + " ".join(f"{k}={v}" for k, v in extra.items())
        text = f"{ts} {record.levelname.lower():7} {record.getMessage()}{tail}"
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


def setup_logging(fmt: str = "json", level: str = "info") -> None:
    """Route the root logger to stderr with the chosen format (called once by the CLI)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(level.upper())
    # urllib3 logs a warning per retried connection; the rescheduler reports those itself.
    logging.getLogger("urllib3").setLevel(logging.ERROR)
