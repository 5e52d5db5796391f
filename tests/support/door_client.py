"""A test client for a whole extender app: ``/filter`` and ``/prioritize`` through the direct door (as the poller
worker gives it a request parsed by gunicorn), every other path through Flask's test client."""

from __future__ import annotations

import io
from typing import Any

import orjson
from flask.testing import FlaskClient

from extender import direct
from extender.app import ExtenderApp


class DoorResponse:
    """The direct door's response, read back: what the tests read of Flask's."""

    def __init__(self, response: bytes, keep_alive: bool) -> None:
        head, _, self.data = response.partition(b"\r\n\r\n")
        status, *lines = head.decode("latin-1").split("\r\n")
        self.status_code = int(status.split(" ")[1])
        self.headers = dict(line.split(": ", 1) for line in lines)
        self.mimetype = self.headers["Content-Type"].split(";")[0]
        self.keep_alive = keep_alive

    @property
    def is_json(self) -> bool:
        return self.mimetype == "application/json"

    @property
    def json(self) -> Any:
        return orjson.loads(self.data)


class AppClient:
    """``post`` and ``get`` like Flask's test client, each request going to the door the worker gives it to."""

    def __init__(self, app: ExtenderApp) -> None:
        self.app = app
        self.flask: FlaskClient = app.test_client()

    def call(self, method: str, path: str, data: bytes = b"", *, chunked: bool = False) -> DoorResponse:
        length = None if chunked else len(data)
        arrived = self.app.arrival()
        response, keep = self.app.direct.respond(method, path, length, io.BytesIO(data).read, arrived, True)
        return DoorResponse(response, keep)

    def post(self, path: str, data: bytes = b"", **kw: Any) -> Any:
        if path in direct.PATHS:
            return self.call("POST", path, data)
        return self.flask.post(path, data=data, **kw)

    def get(self, path: str, **kw: Any) -> Any:
        if path in direct.PATHS:
            return self.call("GET", path)
        return self.flask.get(path, **kw)
