#!/usr/bin/env bash
# Puts the Smart Turn v3.2 end-of-turn model (what `vad` with `turn_model: smart-turn` runs) under the
# project-local prefix .deps/onnx, next to ONNX Runtime (scripts/install-onnx.sh), and skips it when it
# is already there:
#   .deps/onnx/share/smart-turn/smart-turn-v3.2-cpu.onnx   from the pipecat-ai wheel on PyPI
# Only the model file is taken from the wheel (--no-deps: nothing of pipecat is installed).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
prefix="${ONNX_PREFIX:-$root/.deps/onnx}"
pipecat_version=1.14.0
model="$prefix/share/smart-turn/smart-turn-v3.2-cpu.onnx"
stamp="$prefix/share/smart-turn/.installed-pipecat-$pipecat_version"
"$root/scripts/install-onnx.sh" >/dev/null
if [ -f "$stamp" ] && [ -f "$model" ]; then echo "install-smart-turn: present in $prefix"; exit 0; fi
python="$("$root/scripts/install-python-deps.sh" | tail -1)"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
"$python" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
  -d "$tmp" "pipecat-ai==$pipecat_version"
mkdir -p "$(dirname "$model")"
"$python" - "$tmp" "$model" <<'PY'
import glob, os, shutil, sys, zipfile
tmp, dest = sys.argv[1], sys.argv[2]
wheel = glob.glob(os.path.join(tmp, "pipecat_ai-*.whl"))[0]
member = "pipecat/audio/turn/smart_turn/data/smart-turn-v3.2-cpu.onnx"
with zipfile.ZipFile(wheel) as z:
    if member not in z.namelist():
        sys.exit(f"install-smart-turn: {member} is not in {os.path.basename(wheel)}")
    with z.open(member) as src, open(dest + ".part", "wb") as dst:
        shutil.copyfileobj(src, dst)
os.replace(dest + ".part", dest)
PY
touch "$stamp"
echo "install-smart-turn: smart-turn-v3.2-cpu.onnx (pipecat-ai $pipecat_version) in $prefix"
