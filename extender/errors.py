"""The exceptions that cross the HTTP boundary, each with the status code it answers with.

Anything a client sent that we cannot use is a :class:`RequestError` (4xx, with a message saying what was
wrong). The handlers raise these; one Flask error handler turns them into JSON. An exception that is *not*
one of these is a bug of ours: the admission endpoint still allows the pod (a mutating webhook must never
block pod creation), the extender endpoints answer with their ``Error`` field.
"""

from __future__ import annotations

__all__ = [
    "ExtenderError",
    "RequestError",
    "InvalidRequest",
    "PayloadTooLarge",
    "RequestTimeout",
    "UnsupportedMediaType",
    "NotReady",
]


class ExtenderError(Exception):
    """Base of every error this server reports to its client on purpose."""

    status = 500

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class RequestError(ExtenderError):
    """The client's request is at fault (4xx)."""

    status = 400


class InvalidRequest(RequestError):
    """Malformed JSON, a wrong ``kind``, a missing ``uid``, an object that is not a Pod..."""

    status = 400


class PayloadTooLarge(RequestError):
    status = 413


class RequestTimeout(RequestError):
    """The client stopped sending its request body (the socket read timed out)."""

    status = 408


class UnsupportedMediaType(RequestError):
    status = 415


class NotReady(ExtenderError):
    """The node cache has not synced yet: ``/readyz`` fails and NodeNames requests cannot be answered."""

    status = 503
