#!/usr/bin/env bash
# Builds whisper.cpp and ggml for the CPU this runs on, from the pywhispercpp source distribution on PyPI
# (whisper.cpp 1.8.5 with ggml inside), with Debian's cmake and compiler, into PREFIX/native/lib:
#   PREFIX/native/lib/libwhisper.so.1, libggml*.so (found through an $ORIGIN RPATH)
#   PREFIX/native/FEATURES                  the CPU features the build was made for, one line
# The features come from /proc/cpuinfo, one by one (never -march=native): AVX, AVX2, FMA, F16C, BMI2,
# AVX-512 (F, VBMI, VNNI, BF16) and AVX-VNNI where the CPU lists them. AMX is listed by some CPUs whose
# kernel or hypervisor does not let a process use it (the instruction then faults), so it is enabled only
# when a small program that asks the kernel for the tile state and loads a tile configuration runs.
# Skips the build when the same sources were already built for the same features. When anything is
# missing or fails, it says so in one line and exits 0: voicepipe then uses the wheel's library.
# Usage: scripts/build-whisper-native.sh PREFIX [--force]
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
prefix="${1:?usage: build-whisper-native.sh PREFIX [--force]}"
force=0; [ "${2:-}" = "--force" ] && force=1
version=1.5.1
sdist_url="https://files.pythonhosted.org/packages/9f/35/610787a277e177e6b7983277a35a2969c0876b46c0d889bc6a0c4b4ac4a7/pywhispercpp-$version.tar.gz"
sdist_sha256=5df897e5dd9d9f16804fc937bd85b9f5880a0b29a55f8843585e0e03d76195e5
out="$prefix/native"
keep() { echo "build-whisper-native: $1; voicepipe keeps the wheel's library (built for AVX2)" >&2; exit 0; }

[ "$(uname -m)" = x86_64 ] || keep "not an x86-64 machine"
command -v cmake >/dev/null || keep "cmake is missing (apt-get install cmake)"
command -v g++ >/dev/null || keep "g++ is missing (apt-get install g++)"

flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
has() { [[ "$flags" == *" $1 "* ]]; }
options=(-DGGML_NATIVE=OFF -DGGML_CPU_ALL_VARIANTS=OFF -DGGML_BACKEND_DL=OFF -DGGML_SSE42=ON)
features=(sse4.2)
add() { # add CPUINFO_FLAG CMAKE_OPTION
  if has "$1"; then options+=("-D$2=ON"); features+=("$1"); else options+=("-D$2=OFF"); fi
}
add avx GGML_AVX; add avx2 GGML_AVX2; add fma GGML_FMA; add f16c GGML_F16C; add bmi2 GGML_BMI2
add avx512f GGML_AVX512; add avx512vbmi GGML_AVX512_VBMI; add avx512_vnni GGML_AVX512_VNNI
add avx512_bf16 GGML_AVX512_BF16; add avx_vnni GGML_AVX_VNNI

tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
amx=off
if has amx_tile && has amx_int8; then
  # The kernel must grant the tile state (arch_prctl ARCH_REQ_XCOMP_PERM, feature 18), and ldtilecfg must
  # not fault; the probe exits 0 only then.
  cat > "$tmp/amx.c" <<'C'
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
int main(void) {
    if (syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) != 0) return 1;
    uint8_t config[64];
    memset(config, 0, sizeof config);
    config[0] = 1;
    config[16] = 64; config[48] = 16;  /* tile 0: 16 rows of 64 bytes */
    __asm__ volatile("ldtilecfg %0" :: "m"(config));
    __asm__ volatile("tilerelease");
    return 0;
}
C
  if gcc -O0 -o "$tmp/amx" "$tmp/amx.c" 2>/dev/null && "$tmp/amx" 2>/dev/null; then amx=on; fi
fi
if [ $amx = on ]; then
  options+=(-DGGML_AMX_TILE=ON -DGGML_AMX_INT8=ON); features+=(amx_tile amx_int8)
  if has amx_bf16; then options+=(-DGGML_AMX_BF16=ON); features+=(amx_bf16); fi
else
  options+=(-DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF)
fi
stamp="whisper.cpp from pywhispercpp $version for: ${features[*]}"
if [ $force = 0 ] && [ -f "$out/FEATURES" ] && [ "$(cat "$out/FEATURES")" = "$stamp" ] && [ -f "$out/lib/libwhisper.so.1" ]; then
  echo "build-whisper-native: present ($stamp)"
  exit 0
fi

started=$(date +%s)
curl -sSfL --retry 3 -o "$tmp/src.tar.gz" "$sdist_url" || keep "could not download the pywhispercpp $version source distribution"
echo "$sdist_sha256  $tmp/src.tar.gz" | sha256sum -c --quiet - || keep "the pywhispercpp $version source distribution does not match its checksum"
tar -xzf "$tmp/src.tar.gz" -C "$tmp" || keep "could not unpack the source distribution"
src="$tmp/pywhispercpp-$version/whisper.cpp"
[ -f "$src/CMakeLists.txt" ] || keep "the source distribution has no whisper.cpp/CMakeLists.txt"
jobs=$(nproc 2>/dev/null || echo 2)
if ! cmake -S "$src" -B "$tmp/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
      -DWHISPER_BUILD_EXAMPLES=OFF -DWHISPER_BUILD_TESTS=OFF -DWHISPER_BUILD_SERVER=OFF -DWHISPER_SDL2=OFF \
      -DGGML_CCACHE=OFF -DGGML_OPENMP=ON -DCMAKE_INSTALL_RPATH='$ORIGIN' -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON \
      "${options[@]}" > "$tmp/configure.log" 2>&1; then
  tail -5 "$tmp/configure.log" >&2
  keep "cmake could not configure whisper.cpp"
fi
if ! cmake --build "$tmp/build" --target whisper -j "$jobs" > "$tmp/build.log" 2>&1; then
  tail -8 "$tmp/build.log" >&2
  keep "the whisper.cpp build failed"
fi
rm -rf "$out.new"; mkdir -p "$out.new/lib"
find "$tmp/build" \( -name 'libwhisper.so*' -o -name 'libggml*.so*' \) -exec cp -P {} "$out.new/lib/" \;
[ -e "$out.new/lib/libwhisper.so.1" ] || keep "the build made no libwhisper.so.1"
echo "$stamp" > "$out.new/FEATURES"
rm -rf "$out"; mv "$out.new" "$out"
echo "build-whisper-native: built in $(( $(date +%s) - started )) s for ${features[*]} (AMX: $amx) in $out/lib"
