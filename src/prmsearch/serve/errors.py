"""Errors the search server returns, as OpenAI-style bodies clients already know how to read."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """A request the server refuses or could not answer, with its HTTP status.

    The body is OpenAI's: ``{"error": {"message", "type", "param", "code"}}``, so the official
    clients raise their usual exceptions (``BadRequestError``, ``NotFoundError``...) with the message.
    """

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        kind: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.kind = kind or _KINDS.get(status, "server_error")

    def body(self) -> dict[str, Any]:
        """The JSON error body."""
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


_KINDS = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "invalid_request_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    499: "invalid_request_error",
    500: "server_error",
    503: "service_unavailable",
}


def bad_request(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    """400: a value the server understood and refuses (the message says the fix)."""
    return ApiError(400, message, param=param, code=code)


def malformed(message: str, param: str | None = None) -> ApiError:
    """422: a body whose shape is wrong (a missing field, a wrong type)."""
    return ApiError(422, message, param=param, code="invalid_type")
