# Interop of the GGUF reader with an independent implementation: the gguf Python package (gguf-py)
# writes and reads the files, ckpt-inspect and ckpt-verify describe and check them.
# The script exits 77 (skipped) when the package is not installed.
ckpt_python_oracle_test(interop_gguf test_gguf_interop.py)
