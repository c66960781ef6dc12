# Interop with PyTorch Distributed Checkpoint: torch.distributed.checkpoint writes DCP directories
# (one process, two gloo ranks) that ckpt-inspect and ckpt-verify must describe as dcp's own reader
# does (tests/interop/test_dcp_interop.py). The script exits 77 (skipped) when torch is not installed.
ckpt_python_oracle_test(interop_dcp test_dcp_interop.py)
