"""The goodput job's persistent storage as a cluster's: every node reaches it through a link of
``--storage-gbps`` (decimal GB/s) that the node's ranks share, the same for every contender (spec/PYTHON.md 8).

The link is ckpt's ``StorageLink`` (include/ckpt/io/paced_fs.hpp): one small state file per node, so the
node's processes queue behind each other as on a saturated link, and one read cache per node, its page
cache: a block of a file one of the node's ranks read crosses the link once in a launch (data-parallel ranks
loading the same checkpoint), emptied at every launch, a restarted job's cache being cold. ckpt's own
stores and tiers cross it inside the library (files under the contender's storage directory); torch.save and
DCP cross it through the streams below, which charge every byte they write and every block they read that
the node's cache lacks. Memory tiers (tmpfs) are never paced.
"""

from __future__ import annotations

import glob
import os
import shutil
from contextlib import contextmanager

from .. import _ckpt


def link_path(memory_base: str, node: int) -> str:
    """The state file of node `node`'s link (beside the node memory roots; a failure never wipes it)."""
    return os.path.join(memory_base, f"storage-link-node-{node}")


def read_cache(memory_base: str, node: int) -> str:
    """Node `node`'s read cache (its page cache), beside its link's state."""
    return os.path.join(memory_base, f"storage-cache-node-{node}")


def pace(root: str, memory_base: str, node: int, gbps: float) -> None:
    """From now on this process's reads and writes of files under `root` cross node `node`'s link."""
    if gbps <= 0:
        return
    os.makedirs(memory_base, exist_ok=True)
    _ckpt.pace_storage(root, link_path(memory_base, node), gbps * 1e9, read_cache(memory_base, node))


def forget_reads(memory_base: str) -> None:
    """Empties every node's read cache: a launch's processes start with cold caches (the supervisor, at each)."""
    for d in glob.glob(os.path.join(memory_base, "storage-cache-node-*")):
        shutil.rmtree(d, ignore_errors=True)


def transfer(n: int) -> None:
    """Waits as `n` bytes written across this process's link would (nothing when unpaced)."""
    if n > 0:
        _ckpt.storage_transfer(n)


def read(path: str, offset: int, n: int, file_size: int) -> None:
    """Waits as bytes [offset, offset + n) of `path` (of `file_size` bytes) read across the link would: each
    block they touch that the node's read cache lacks crosses whole, the rest is free (nothing when unpaced)."""
    if n > 0:
        _ckpt.storage_read(os.path.abspath(path), offset, n, file_size)


def stats():
    """(bytes this process moved across its link, the link's seconds for them), or None when unpaced."""
    return _ckpt.storage_link_stats()


class PacedStream:
    """A binary file (at `path`) whose reads and writes cross the link; everything else is the file's."""

    def __init__(self, f, path: str):
        self._f, self._path, self._size = f, os.path.abspath(path), None

    def write(self, b) -> int:
        transfer(memoryview(b).nbytes)  # the bytes cross the link before they land
        return self._f.write(b)

    def _read(self, at: int, n: int) -> None:
        if self._size is None:  # a file read is not written meanwhile: its size asked once
            self._size = os.fstat(self._f.fileno()).st_size
        read(self._path, at, n, self._size)

    def read(self, n: int = -1) -> bytes:
        at = self._f.tell()
        data = self._f.read(n)
        self._read(at, len(data))
        return data

    def readinto(self, b) -> int:
        at = self._f.tell()
        n = self._f.readinto(b)
        self._read(at, n or 0)
        return n

    def __getattr__(self, name):
        return getattr(self._f, name)


def dcp_file_system():
    """DCP's FileSystem whose streams cross the link (FileSystemWriter's and FileSystemReader's ``fs``)."""
    from torch.distributed.checkpoint.filesystem import FileSystem

    class PacedFileSystem(FileSystem):
        @contextmanager
        def create_stream(self, path, mode):
            with super().create_stream(path, mode) as stream:
                yield PacedStream(stream, str(path))

    return PacedFileSystem()
