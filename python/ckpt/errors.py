"""Exceptions of the ckpt package (spec/PYTHON.md 3).

Every error the C++ library reports arrives as a ``CkptError`` subclass chosen by its code. An error
about damaged bytes carries the structured problem: ``file``, ``tensor``, ``piece``, ``chunk`` and the
byte range ``offset``/``length`` in that file, with the ``expected`` and ``found`` digests, so that a
caller acts on it without parsing the message.
"""

from __future__ import annotations

from typing import Any, Optional


class CkptError(Exception):
    """An error reported by ckpt; ``code`` is the library's code name (``corrupt``, ``not_found``...)."""

    code = "error"

    def __init__(self, message: str, problem: Optional[dict] = None):
        super().__init__(message)
        self.message = message
        self.problem = problem or None
        p = problem or {}
        self.file: Optional[str] = p.get("file") or None
        self.tensor: Optional[str] = p.get("tensor") or None
        self.piece: Optional[int] = p.get("piece") if p.get("piece", -1) >= 0 else None
        self.chunk: Optional[int] = p.get("chunk") if p.get("chunk", -1) >= 0 else None
        self.offset: Optional[int] = p.get("offset") if p else None
        self.length: Optional[int] = p.get("length") if p else None
        self.expected: Optional[str] = p.get("expected") or None
        self.found: Optional[str] = p.get("found") or None

    @property
    def byte_range(self) -> Optional[tuple]:
        """``(begin, end)`` of the damaged bytes in ``file``, when known."""
        if self.offset is None or self.length is None:
            return None
        return (self.offset, self.offset + self.length)


class IntegrityError(CkptError):
    """Bytes on disk do not match their digest or a structural rule, or end early."""


class CorruptError(IntegrityError):
    code = "corrupt"


class IncompleteError(IntegrityError):
    code = "incomplete"


class VersionError(CkptError):
    code = "version"


class NotFoundError(CkptError, KeyError):
    code = "not_found"

    def __str__(self) -> str:  # KeyError would quote the message
        return self.message


class InvalidArgumentError(CkptError, ValueError):
    code = "invalid_argument"


class ConflictError(CkptError):
    code = "conflict"


class UnsupportedError(CkptError):
    code = "unsupported"


class CancelledError(CkptError):
    code = "cancelled"


class CkptIOError(CkptError, OSError):
    code = "io"

    def __str__(self) -> str:
        return self.message


_BY_CODE = {c.code: c for c in (CorruptError, IncompleteError, VersionError, NotFoundError, InvalidArgumentError,
                                ConflictError, UnsupportedError, CancelledError, CkptIOError)}


def _from_status(code: str, message: str, problem: Any) -> CkptError:
    """Called by the extension for every failed Status."""
    return _BY_CODE.get(code, CkptError)(message, problem)
