"""What the benchmarks report about the machine they ran on. Standard library only: bench/bench-tiers.py
loads this file by path, without the ckpt package (or its extension) installed."""

import os


def mount_of(path):
    """(mount point, file system type, device) of the longest mount point in /proc/mounts that holds path,
    or None when /proc/mounts cannot be read."""
    path = os.path.realpath(path)
    best = None
    try:
        with open("/proc/mounts") as f:
            for line in f:
                dev, mnt, kind = line.split()[:3]
                if (path == mnt or path.startswith(mnt.rstrip("/") + "/")) and (best is None or len(mnt) >= len(best[0])):
                    best = (mnt, kind, dev)
    except OSError:
        pass
    return best
