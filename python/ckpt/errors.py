"""Exceptions of the ckpt package (spec/PYTHON.md 3).

Every error the C++ library reports arrives as a ``CkptError`` subclass chosen by its code. An error
about damaged bytes carries the structured problem: ``file``, ``tensor``, ``piece``, ``chunk`` and the
byte range ``offset``/``length`` in that file, with the ``expected`` and ``found`` digests, so that a
caller acts on it without parsing the message.
"""

from __future__ import annotations

from typing import Any, Optional

_BY_CODE: dict = {}  # code name -> the class raised for it, filled as each class below is defined


class CkptError(Exception):
    """An error reported by ckpt; ``code`` is the library's code name (``corrupt``, ``not_found``...)."""

    code = "error"

    def __init_subclass__(cls, code: str = "", **kwargs):
        """``class CorruptError(IntegrityError, code="corrupt")``: the class raised for that code."""
        super().__init_subclass__(**kwargs)
        if code:
            cls.code = code
            _BY_CODE[code] = cls

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

    def __str__(self) -> str:  # the message alone, also where KeyError would quote it and OSError format it
        return self.message

    @property
    def byte_range(self) -> Optional[tuple]:
        """``(begin, end)`` of the damaged bytes in ``file``, when known."""
        if self.offset is None or self.length is None:
            return None
        return (self.offset, self.offset + self.length)


class IntegrityError(CkptError):
    """Bytes on disk do not match their digest or a structural rule, or end early."""


class CorruptError(IntegrityError, code="corrupt"):
    """Bytes on disk do not match their digest or a structural rule."""


class SilentDataCorruptionError(CorruptError):
    """The SDC canary's finding (spec/TIERS.md 11): ranks that hold the same bytes disagreed on them at a
    capture. That step is in no tier; stop, and relaunch: the resume takes the newest step they agreed on."""


class IncompleteError(IntegrityError, code="incomplete"):
    """A file or log ends before it should: a torn write, a truncated copy."""


class VersionError(CkptError, code="version"):
    """An unknown format version or an incompatible feature flag."""


class NotFoundError(CkptError, KeyError, code="not_found"):
    """A named tensor, step, key or file does not exist."""


class InvalidArgumentError(CkptError, ValueError, code="invalid_argument"):
    """The caller asked for something impossible."""


class ConflictError(CkptError, code="conflict"):
    """A lock is held or a name already exists: another writer, or a transaction already open."""


class UnsupportedError(CkptError, code="unsupported"):
    """A valid request this build cannot serve."""


class CancelledError(CkptError, code="cancelled"):
    """A save abandoned by a deadline-bounded flush, or not taken because one was requested."""


class CkptIOError(CkptError, OSError, code="io"):
    """The operating system refused an operation (EIO, ENOSPC, EACCES...)."""


def _from_status(code: str, message: str, problem: Any) -> CkptError:
    """Called by the extension for every failed Status."""
    return _BY_CODE.get(code, CkptError)(message, problem)
