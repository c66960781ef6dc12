# Interop with independent implementations: the Python safetensors package against ckpt-convert.
# The script exits 77 (skipped) when the Python oracles are not installed.
ckpt_python_oracle_test(interop_safetensors test_safetensors_interop.py)
# Identity (root digests, pins, diffs) and sidecars, against the safetensors and xxhash packages.
ckpt_python_oracle_test(interop_identity test_identity_interop.py)
# Round trips through ckpt-convert, ckpt-reshard and ckpt-merge give back tensors and __metadata__ (issue 22).
ckpt_python_oracle_test(interop_round_trip test_round_trip_interop.py)

# The interpreter every Python test above and below runs is the pinned environment (docs/dependencies.md):
# an oracle skipped or a server of another version cannot hide behind a drifted system.
if(Python3_Interpreter_FOUND)
  add_test(NAME python_env_pinned
    COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tools/check-python-env.py ${PROJECT_SOURCE_DIR}/tools/constraints.txt)
  set_tests_properties(python_env_pinned PROPERTIES LABELS interop SKIP_RETURN_CODE 77 TIMEOUT 60)
endif()
