"""Verdicts, descriptions, digests and diffs, as the tools give them (spec/PYTHON.md 2.4, spec/REPORTS.md).

The library decides (include/ckpt/report/); ckpt-verify, ckpt-inspect, ckpt-diff and ckpt-repair print
its documents, and these functions return the same documents as report objects: every field of the
tool's ``--json`` is an attribute (``report.files``, ``report.summary``, ``report.steps[0].status``),
``report.json`` is the document itself, ``report.kind`` and ``report.exit_code`` are the library's (the
document's "subject" and "exit_code"), and ``report.text`` is what the tool prints without ``--json``
(the library's text, include/ckpt/report/text.hpp). Damage is in the report; only input that cannot be
checked at all raises (a missing path, misuse, I/O errors).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Iterable, List, Optional

from . import _ckpt


@dataclass
class Problem:
    """One problem: where (file, region, tensor, piece, chunk, byte range) and what (expected, found)."""

    code: str
    region: str
    file: str
    tensor: Optional[str]
    piece: Optional[int]
    chunk: Optional[int]
    offset: int
    length: int
    expected: Optional[str]
    found: Optional[str]
    message: str

    @classmethod
    def from_json(cls, j: dict, file: str = "") -> "Problem":
        return cls(code=j.get("code", ""), region=j.get("region", ""), file=j.get("file") or file, tensor=j.get("tensor"),
                   piece=j.get("piece"), chunk=j.get("chunk"), offset=j.get("offset", 0), length=j.get("length", 0),
                   expected=j.get("expected"), found=j.get("found"), message=j.get("message", ""))


def _wrap(value):
    if isinstance(value, dict):
        return Report(value)
    if isinstance(value, list):
        return [_wrap(v) for v in value]
    return value


class Report:
    """A report document with attribute access; ``report.json`` is the document, ``report["key"]`` works too,
    ``report.text`` the library's text of it."""

    def __init__(self, doc: dict, text: str = ""):
        object.__setattr__(self, "json", doc)
        object.__setattr__(self, "text", text)

    @classmethod
    def _from(cls, pair):
        doc, text = pair
        return cls(json.loads(doc), text.decode("utf-8", "replace"))

    @property
    def kind(self) -> str:
        """What the report describes, as the library named it (the document's "subject"; a part of a
        document without one, such as a memory root inside a verify report, keeps its own "kind")."""
        for key in ("subject", "kind"):
            if key in self.json:
                return self.json[key]
        raise AttributeError("kind")

    @property
    def exit_code(self) -> int:
        """The tool's exit status, as the library computed it."""
        try:
            return self.json["exit_code"]
        except KeyError:
            raise AttributeError("exit_code") from None

    def __str__(self) -> str:
        return self.text

    def __getattr__(self, name):
        try:
            return _wrap(self.json[name])
        except KeyError:
            raise AttributeError(name) from None

    def __getitem__(self, key):
        return _wrap(self.json[key])

    def __contains__(self, key) -> bool:
        return key in self.json

    def __eq__(self, other) -> bool:
        return isinstance(other, Report) and self.json == other.json

    def __repr__(self) -> str:
        return "%s(%s)" % (type(self).__name__, json.dumps(self.json)[:200])


class VerifyReport(Report):
    """What ``ckpt-verify --json`` prints for one path: ok, exit_code, files, summary, and as they apply
    stores, steps, foreign, memory_roots, pins, errors. ``kind`` is what the path named: "store", "step
    directory", "foreign", "memory root" or "file"."""

    def __bool__(self) -> bool:
        return bool(self.json["ok"])

    @property
    def problems(self) -> List[Problem]:
        """Every problem of the report, each once: shard files, steps, store journals, foreign checkpoints, memory roots."""
        j = self.json
        out = [Problem.from_json(p, f["path"]) for f in j.get("files", []) for p in f.get("problems", [])]
        out += [Problem.from_json(p, s["path"]) for s in j.get("steps", []) for p in s.get("problems", [])]
        out += [Problem(code=p["code"], region="journal", file=s["path"], tensor=None, piece=None, chunk=None, offset=0, length=0,
                        expected=None, found=None, message=p["message"]) for s in j.get("stores", []) for p in s.get("problems", [])]
        out += [Problem.from_json(p, f["path"]) for f in j.get("foreign", []) for p in f.get("problems", [])]
        out += [Problem.from_json(p, r["path"]) for r in j.get("memory_roots", []) for p in r.get("problems", [])]
        return out

    @property
    def chunks_checked(self) -> int:
        j = self.json
        return sum(f.get("chunks_checked", 0) for f in j.get("files", []) + j.get("foreign", []))

    @property
    def bytes_checked(self) -> int:
        j = self.json
        return sum(f.get("bytes_checked", 0) for f in j.get("files", []) + j.get("foreign", []))


class Inspection(Report):
    """What ``ckpt-inspect --json`` prints; ``kind`` says which: "shard", "step", "store", "foreign" or "memory_root"."""

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


class Diff(Report):
    """What ``ckpt-diff --json`` prints: identical, tensors, metadata, a, b, data_read, selected."""

    def __bool__(self) -> bool:
        return not self.json["identical"]


class Repair(Report):
    """What ``ckpt-repair --json`` prints: found, plan, actions, steps, quarantine, consistent, result;
    ``kind`` is "store", "memory root" or "object store"."""

    def __bool__(self) -> bool:
        return bool(self.json["consistent"])


def verify(path, step: Optional[int] = None, *, latest: bool = False, expect: Optional[str] = None,
           expect_file=None, persistent=None, threads: int = 1) -> VerifyReport:
    """Checks every byte of what ``path`` names, as ``ckpt-verify --json`` does: a .ckpt file, a step
    directory, a store (every committed step, ``step``, or ``latest``), a memory tier's root, or a
    safetensors / Hugging Face / DCP / GGUF checkpoint (every byte when it has a sidecar). ``expect`` is
    a root digest and ``expect_file`` a pin file the checkpoint must match (``ckpt-verify --expect``)."""
    doc = _ckpt.verify_report(os.fspath(path), step, latest, expect, None if expect_file is None else os.fspath(expect_file),
                              "" if persistent is None else os.fspath(persistent), threads)
    return VerifyReport._from(doc)


def inspect(path, step: Optional[int] = None, *, latest: bool = False, chunks: bool = False, persistent=None) -> Inspection:
    """Describes what ``path`` names, as ``ckpt-inspect --json`` does, with its root digest where known."""
    return Inspection._from(_ckpt.inspect_report(os.fspath(path), step, latest, chunks, "" if persistent is None else os.fspath(persistent)))


def root_digest(path, step: Optional[int] = None) -> str:
    """The root digest ``ckpt-inspect --pin`` prints (spec/IDENTITY.md): a store's is its latest step's, or ``step``'s."""
    return _ckpt.root_digest(os.fspath(path), step)


def diff(a, b, *, step_a: Optional[int] = None, step_b: Optional[int] = None, tensors: Iterable[str] = ()) -> Diff:
    """Which tensors ``b`` adds, removes or changes against ``a``, and which chunks, as ``ckpt-diff --json``;
    ``tensors`` are globs selecting the tensors compared."""
    return Diff._from(_ckpt.diff_report(os.fspath(a), os.fspath(b), step_a, step_b, list(tensors)))


def write_sidecar(path, chunk_size: int = 1 << 20) -> Report:
    """Records the digests of a foreign checkpoint beside it (``ckpt-verify --write-sidecar``); from then
    on ``verify`` checks every byte of it. Returns what was written: sidecar, root_digest, chunks, bytes."""
    return Report._from(_ckpt.write_sidecar_report(os.fspath(path), chunk_size))


def repair(path, *, dry_run: bool = False, purge: bool = False) -> Repair:
    """Repairs what ``path`` names, as ``ckpt-repair --json`` does: a store directory (recovery, or a journal
    rebuilt from the step directories that verify; ``purge`` deletes quarantine/), a memory tier's root or
    rank directory, or a store on objects. ``dry_run`` changes nothing. Damage that remains is the report's."""
    return Repair._from(_ckpt.repair_report(os.fspath(path), dry_run, purge))
