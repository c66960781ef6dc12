# Sourced by tools/demo.sh and tests/run.sh: installs what they need (tools/install-deps.sh), then makes the
# repository's own Python environment the one every python3, pip, moto_server and weed after it comes from,
# never the system interpreter's packages (docs/dependencies.md).
#   . tools/venv.sh            build/venv: the versions of tools/constraints.txt
#   . tools/venv.sh --latest   build/venv-latest: the newest of each (upstream drift)
if [ "${1:-}" = --latest ]; then
  export CKPT_VENV=${CKPT_VENV:-$PWD/build/venv-latest} CKPT_DEPS=latest
  bash tools/install-deps.sh --latest
else
  export CKPT_VENV=${CKPT_VENV:-$PWD/build/venv}
  bash tools/install-deps.sh
fi
export VIRTUAL_ENV=$CKPT_VENV PATH="$CKPT_VENV/bin:$PATH"
