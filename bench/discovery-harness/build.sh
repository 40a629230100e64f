#!/usr/bin/env bash
# Builds the discovery harness (bench/discovery-harness/main.swift) with the three files of
# Sources/ServiceDiscovery and the intercom session of Sources/CoreNodes/Discovery, by swiftc directly (independent of SwiftPM and the rest of CoreNodes), and the
# self-test of the wire format and the session state machine (selftest.swift).
# Prints the harness binary's path.
#   bench/discovery-harness/build.sh [OUT]     default OUT: .build/discovery-harness
#   "$(dirname OUT)/discovery-selftest"        runs the self-test
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-.build/discovery-harness}
selftest=$(dirname "$out")/discovery-selftest
mkdir -p "$(dirname "$out")"
lib=(Sources/ServiceDiscovery/DNSMessage.swift Sources/ServiceDiscovery/MulticastDNS.swift
     Sources/CoreNodes/Discovery/IntercomSession.swift)
flags=(-O -parse-as-library -swift-version 6 -module-name DiscoveryHarness)
stale() { [ ! -x "$1" ] || [ -n "$(find "${lib[@]}" "$2" -newer "$1" 2>/dev/null)" ]; }
if stale "$out" bench/discovery-harness/main.swift; then
    swiftc "${flags[@]}" "${lib[@]}" bench/discovery-harness/main.swift -o "$out"
fi
if stale "$selftest" bench/discovery-harness/selftest.swift; then
    swiftc "${flags[@]}" "${lib[@]}" bench/discovery-harness/selftest.swift -o "$selftest"
fi
echo "$out"
