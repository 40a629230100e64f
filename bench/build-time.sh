#!/usr/bin/env bash
# Clean debug builds side by side: the embedding app on CoreNodes (Examples/embedded-app) and the full
# `voicepipe` product, each from an empty build folder (dependencies come from SwiftPM's cache; nothing is
# fetched from the network when the cache holds them). Prints wall and CPU seconds, the Swift modules
# each build compiled, and checks that the app's build holds no SwiftNIO, BoringSSL or AsyncHTTPClient.
#   bench/build-time.sh [WORK_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
work=${1:-/tmp/voicepipe-build-time}
rm -rf "$work"
mkdir -p "$work"

build() {  # name, swift build arguments...
    local name=$1; shift
    local start end
    start=$(date +%s.%N)
    /usr/bin/time -f "%U %S" -o "$work/$name.cpu" swift build --scratch-path "$work/$name" "$@" > "$work/$name.log" 2>&1 || {
        echo "build of $name failed; see $work/$name.log" >&2; tail -20 "$work/$name.log" >&2; exit 1; }
    end=$(date +%s.%N)
    local wall cpu modules
    wall=$(python3 -c "print(f'{$end - $start:.0f}')")
    cpu=$(awk '{printf "%.0f", $1 + $2}' "$work/$name.cpu")
    modules=$(find "$work/$name/debug/Modules" -maxdepth 1 -name '*.swiftmodule' | wc -l)
    echo "$name $wall $cpu $modules"
}

app=$(build app --package-path Examples/embedded-app)
full=$(build full --product voicepipe)
read -r _ app_wall app_cpu app_modules <<< "$app"
read -r _ full_wall full_cpu full_modules <<< "$full"

heavy=$(find "$work/app/debug/Modules" -maxdepth 1 \( -name 'NIO*.swiftmodule' -o -name 'AsyncHTTPClient.swiftmodule' \
    -o -name 'Crypto.swiftmodule' -o -name 'WSClient.swiftmodule' \) -printf '%f ')
heavy_c=$(find "$work/app/debug" -maxdepth 1 -type d \( -name 'CNIOBoringSSL.build' -o -name 'CCryptoBoringSSL.build' \) -printf '%f ')

printf '| build | wall s | CPU s | Swift modules |\n|---|---|---|---|\n'
printf '| Examples/embedded-app (CoreNodes) | %s | %s | %s |\n' "$app_wall" "$app_cpu" "$app_modules"
printf '| voicepipe (every node type, serve, CLI) | %s | %s | %s |\n' "$full_wall" "$full_cpu" "$full_modules"
python3 -c "print(f'app/full: wall {$app_wall/$full_wall:.2f}, CPU {$app_cpu/$full_cpu:.2f}')"
if [ -n "$heavy$heavy_c" ]; then
    echo "the app's build compiled $heavy$heavy_c" >&2
    exit 1
fi
echo "the app's build compiled no SwiftNIO, BoringSSL, swift-crypto or AsyncHTTPClient module"
