"""verify(path): what ckpt-verify checks, as a report object (spec/PYTHON.md 2.4)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import List, Optional

from . import _ckpt


@dataclass
class Problem:
    code: str
    region: str
    file: str
    tensor: str
    piece: int
    chunk: int
    offset: int
    length: int
    expected: str
    found: str
    message: str


@dataclass
class VerifyReport:
    path: str
    kind: str
    ok: bool
    problems: List[Problem] = field(default_factory=list)
    steps: List[dict] = field(default_factory=list)
    chunks_checked: int = 0
    bytes_checked: int = 0

    def __bool__(self) -> bool:
        return self.ok


def verify(path, step: Optional[int] = None, threads: int = 1) -> VerifyReport:
    """Checks every chunk digest and structural rule of a .ckpt file, a step directory, or a store
    (every live step, or ``step``). Damage is in the report; only unreadable input raises."""
    r = _ckpt.verify(os.fspath(path), step, threads)
    return VerifyReport(path=r["path"], kind=r["kind"], ok=r["ok"], problems=[Problem(**p) for p in r["problems"]],
                        steps=r["steps"], chunks_checked=r["chunks_checked"], bytes_checked=r["bytes_checked"])
