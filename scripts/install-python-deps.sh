#!/usr/bin/env bash
# Installs the Python packages the tests and benchmarks use into a project-local virtual
# environment, .deps/venv (nothing is installed system-wide): wyoming (the Wyoming test server) and
# webrtcvad (the anchor of bench/vad-bench.py; built from source, needs gcc). Skips what is there. Prints the environment's python on the last line.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.deps/venv
packages=(wyoming==1.10.2 webrtcvad==2.0.10)
if [ ! -x "$venv/bin/python3" ]; then
  if ! python3 -m venv "$venv" >/dev/null 2>&1; then
    # Debian's own python3 needs python3-venv for this.
    sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
    rm -rf "$venv"
    python3 -m venv "$venv"
  fi
fi
missing=()
for p in "${packages[@]}"; do
  name="${p%%==*}"
  "$venv/bin/python3" -c "import importlib.metadata as m, sys; sys.exit(0 if m.version('$name') == '${p##*==}' else 1)" 2>/dev/null || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-python-deps: installing ${missing[*]}" >&2
  "$venv/bin/python3" -m pip install -q --disable-pip-version-check "${missing[@]}" >&2
fi
echo "$PWD/$venv/bin/python3"
