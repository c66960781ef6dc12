"""The tensor bytes dcp_worker.py saves, for tests that look for them in shard files."""

import sys
import os

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dcp_worker import full_weight  # noqa: E402


def weight_bytes(step):
    return full_weight(step).numpy().tobytes()
