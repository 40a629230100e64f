#!/usr/bin/env bash
# Installs the Debian packages voicepipe builds, runs and tests with (skips what is already there).
set -euo pipefail
packages=(
  pkg-config libasound2-dev libpulse-dev pulseaudio pulseaudio-utils libasound2-plugins alsa-utils
  libopus-dev libspeexdsp-dev libpocketsphinx-dev pocketsphinx-en-us pocketsphinx-testdata
  libavcodec-dev libavformat-dev libswresample-dev gstreamer1.0-libav libwebrtc-audio-processing-dev
  espeak-ng flite flite1-dev libespeak-ng-dev sox libsox-fmt-all
  gstreamer1.0-tools gstreamer1.0-plugins-base gstreamer1.0-plugins-good
  libcurl4-openssl-dev libyaml-dev graphviz openssl procps bc python3 iproute2
  cmake g++ curl
  nginx nats-server
  baresip-core sip-tester libspandsp2
  chromium chromium-driver
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
# nginx and nats-server are Debian services that start when installed (nginx on port 80, where a failed
# bind also fails the install); the tests run private instances on free ports. Keep them from starting:
# a policy-rc.d that refuses service starts while apt runs (unless the machine has its own), and the
# services left disabled.
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
  trap '$sudo rm -f "$policy"' EXIT
  printf '#!/bin/sh\n# written by voicepipe scripts/install-deps.sh while it installs packages\nexit 101\n' | $sudo tee "$policy" >/dev/null
  $sudo chmod 755 "$policy"
fi
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
if [ -d /run/systemd/system ]; then
  for service in nginx nats-server; do
    [[ " ${missing[*]} " == *" $service "* ]] && $sudo systemctl disable --now "$service" >/dev/null 2>&1 || true
  done
fi
echo "install-deps: done"
