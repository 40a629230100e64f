#!/usr/bin/env bash
# Puts what `vad` with `engine: silero` needs under the project-local prefix .deps/onnx, from PyPI
# wheels only (no root, nothing system-wide), and skips it when it is already there:
#   .deps/onnx/lib/libonnxruntime.so.1            ONNX Runtime's C library (onnxruntime wheel)
#   .deps/onnx/lib/pkgconfig/onnxruntime.pc       for C and Swift code that links it directly
#   .deps/onnx/include/onnxruntime/voicepipe_ort.h the part of the C ABI voicepipe uses
#   .deps/onnx/share/silero-vad/silero_vad.onnx   the Silero VAD model (silero-vad wheel)
# voicepipe loads the library at run time, so `swift build` does not need any of it.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
prefix="${ONNX_PREFIX:-$root/.deps/onnx}"
ort_version=1.32.0
silero_version=6.2.3
stamp="$prefix/.installed-onnxruntime-$ort_version-silero-$silero_version"
if [ -f "$stamp" ]; then echo "install-onnx: present in $prefix"; exit 0; fi
# pip from the project's virtual environment: a Debian python3 has no pip of its own.
python="$("$root/scripts/install-python-deps.sh" | tail -1)"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
# --no-deps: the silero-vad wheel would otherwise pull in torch; only its model file is used.
"$python" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
  -d "$tmp" "onnxruntime==$ort_version" "silero-vad==$silero_version"
rm -rf "$prefix"
mkdir -p "$prefix/lib/pkgconfig" "$prefix/include/onnxruntime" "$prefix/share/silero-vad"
"$python" - "$tmp" "$prefix" <<'PY'
import glob, os, shutil, sys, zipfile
tmp, prefix = sys.argv[1], sys.argv[2]
def copy(wheel, member, dest):
    with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(dest, "wb") as dst:
        shutil.copyfileobj(src, dst)
ort = glob.glob(os.path.join(tmp, "onnxruntime-*.whl"))[0]
with zipfile.ZipFile(ort) as z:
    libs = [n for n in z.namelist() if os.path.basename(n).startswith("libonnxruntime.so.")]
if len(libs) != 1:
    sys.exit(f"install-onnx: expected one libonnxruntime.so.* in {os.path.basename(ort)}, found {libs}")
copy(ort, libs[0], os.path.join(prefix, "lib", os.path.basename(libs[0])))
silero = glob.glob(os.path.join(tmp, "silero_vad-*.whl"))[0]
copy(silero, "silero_vad/data/silero_vad.onnx", os.path.join(prefix, "share/silero-vad/silero_vad.onnx"))
PY
real="$(cd "$prefix/lib" && ls libonnxruntime.so.*.*.*)"
ln -sf "$real" "$prefix/lib/libonnxruntime.so.1"
ln -sf libonnxruntime.so.1 "$prefix/lib/libonnxruntime.so"
cp "$root/Sources/COnnxRuntime/include/voicepipe_ort.h" "$prefix/include/onnxruntime/"
cat > "$prefix/lib/pkgconfig/onnxruntime.pc" <<PC
prefix=$prefix
libdir=\${prefix}/lib
includedir=\${prefix}/include

Name: onnxruntime
Description: ONNX Runtime C API (shared library from the PyPI onnxruntime wheel)
Version: $ort_version
Libs: -L\${libdir} -lonnxruntime
Cflags: -I\${includedir}/onnxruntime
PC
touch "$stamp"
echo "install-onnx: onnxruntime $ort_version and silero_vad.onnx ($silero_version) in $prefix"
