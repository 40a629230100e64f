#!/usr/bin/env bash
# Installs the Python packages the tests use into a project-local virtual environment, .deps/venv
# (nothing is installed system-wide): wyoming (the Wyoming test server), kubernetes-validate
# (scripts/check-manifests.sh; it carries the Kubernetes JSON schemas) and nats-py (the JetStream reader
# of bench/cluster/cluster.py), numpy (scripts/whisper-ct2-to-ggml.py) and faster-whisper (the reference the
# Whisper engine is tested and measured against), selenium (drives Chromium in the browser page tests),
# pymicro-features and pymicro-wakeword (the reference the microWakeWord front end is tested against). With --bench also webrtcvad (the anchor of bench/vad-bench.py; built
# from source). Skips what is already there. Prints the environment's python on the last line (other
# scripts use its pip).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.deps/venv
packages=(wyoming==1.10.2 kubernetes-validate==1.37.0 nats-py==2.16.0 numpy==2.4.6 onnx==1.23.2 faster-whisper==1.2.1 selenium==4.51.0 pymicro-features==2.0.2 pymicro-wakeword==2.5.0)
[ "${1:-}" = "--bench" ] && packages+=(webrtcvad==2.0.10)
sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
if [ ! -x "$venv/bin/python3" ] || ! "$venv/bin/python3" -m pip --version >/dev/null 2>&1; then
  rm -rf "$venv"
  if ! python3 -m venv "$venv" >/dev/null 2>&1; then
    # Debian's own python3 needs python3-venv (which brings pip into the environment) for this.
    rm -rf "$venv"
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
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
  if [[ " ${missing[*]} " == *" webrtcvad"* ]] && ! python3 -c "import sysconfig, os, sys; sys.exit(0 if os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h')) else 1)"; then
    # webrtcvad is compiled: it needs the interpreter's headers and a C compiler.
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends python3-dev gcc >/dev/null
  fi
  "$venv/bin/python3" -m pip install -q --disable-pip-version-check "${missing[@]}" >&2
fi
echo "$PWD/$venv/bin/python3"
