#!/usr/bin/env bash
# A private PulseAudio daemon for tests and CI: no login session, no sound card, works as root.
#
#   source scripts/pulse-env.sh start   # starts the daemon, exports PULSE_SERVER, ALSA_CONFIG_PATH, ...
#   swift test                          # sees the daemon through the exported variables
#   scripts/pulse-env.sh stop           # stops it (or: source scripts/pulse-env.sh stop)
#   scripts/pulse-env.sh status
#
# The daemon has one null sink, `vp_null`, which is the default sink; its monitor `vp_null.monitor`
# is the default source, so what is played can be recorded back. A low-latency stream of
# silence keeps the sink rendering in small steps, so its monitor behaves like a live microphone
# (an idle null sink sleeps up to seconds at a time, and a recorder that connects then waits). ALSA's `default` PCM and CTL are
# routed through the daemon (libasound2-plugins), so alsa-source/alsa-sink reach the same sink.
# State lives in VOICEPIPE_PULSE_DIR (default /tmp/voicepipe-pulse-$UID).

_vp_pulse_main() {
    local cmd="${1:-start}"
    local dir="${VOICEPIPE_PULSE_DIR:-/tmp/voicepipe-pulse-$(id -u)}"
    case "$cmd" in
    start)
        if [ -f "$dir/pid" ] && kill -0 "$(cat "$dir/pid")" 2>/dev/null; then
            echo "pulse-env: daemon already running (pid $(cat "$dir/pid"))" >&2
        else
            command -v pulseaudio >/dev/null || { echo "pulse-env: pulseaudio is not installed (apt-get install pulseaudio libasound2-plugins)" >&2; return 1; }
            rm -rf "$dir"
            mkdir -p "$dir/runtime" "$dir/state" "$dir/home"
            chmod 700 "$dir" "$dir/runtime"
            cat > "$dir/default.pa" <<PA
load-module module-null-sink sink_name=vp_null rate=48000 channels=2 sink_properties=device.description=voicepipe-null-sink
load-module module-native-protocol-unix auth-anonymous=1 socket=$dir/runtime/native
set-default-sink vp_null
set-default-source vp_null.monitor
PA
            cat > "$dir/daemon.conf" <<CONF
daemonize = no
system-instance = no
exit-idle-time = -1
flat-volumes = no
realtime-scheduling = no
high-priority = no
default-sample-rate = 48000
default-sample-channels = 2
log-target = stderr
CONF
            cat > "$dir/asound.conf" <<ALSA
</usr/share/alsa/alsa.conf>
pcm.!default {
    type pulse
    hint { show on description "Private PulseAudio daemon (voicepipe tests)" }
}
ctl.!default {
    type pulse
}
ALSA
            # pulseaudio refuses to run as root unless told where its state goes and that it is
            # not a system instance; HOME/XDG_* point into the private directory for that reason.
            ( export HOME="$dir/home" XDG_RUNTIME_DIR="$dir/runtime" XDG_CONFIG_HOME="$dir/home/.config" \
                     PULSE_RUNTIME_PATH="$dir/runtime" PULSE_STATE_PATH="$dir/state"
              unset PULSE_SERVER
              exec setsid pulseaudio -n -F "$dir/default.pa" --daemonize=no --system=false \
                   --exit-idle-time=-1 --disallow-exit --disable-shm=yes --use-pid-file=no \
                   --log-target=file:"$dir/pulseaudio.log" --log-level=notice \
                   2>>"$dir/pulseaudio.log" ) </dev/null >/dev/null 2>&1 &
            echo $! > "$dir/pid"
            local i
            for i in $(seq 1 100); do
                [ -S "$dir/runtime/native" ] && PULSE_SERVER="unix:$dir/runtime/native" pactl info >/dev/null 2>&1 && break
                sleep 0.1
            done
            if ! PULSE_SERVER="unix:$dir/runtime/native" pactl info >/dev/null 2>&1; then
                echo "pulse-env: the daemon did not come up; log follows" >&2
                cat "$dir/pulseaudio.log" >&2
                kill "$(cat "$dir/pid")" 2>/dev/null
                return 1
            fi
            ( PULSE_SERVER="unix:$dir/runtime/native" exec pacat --playback --raw --format=s16le --rate=16000 --channels=1 \
                  --latency-msec=10 --client-name=voicepipe-keepalive -d vp_null </dev/zero >/dev/null 2>&1 ) &
            echo $! > "$dir/keepalive.pid"
        fi
        export PULSE_SERVER="unix:$dir/runtime/native"
        export PULSE_RUNTIME_PATH="$dir/runtime"
        export ALSA_CONFIG_PATH="$dir/asound.conf"
        export VOICEPIPE_PULSE_DIR="$dir"
        echo "pulse-env: PulseAudio running (pid $(cat "$dir/pid")), PULSE_SERVER=$PULSE_SERVER, ALSA_CONFIG_PATH=$ALSA_CONFIG_PATH" >&2
        ;;
    stop)
        if [ -f "$dir/keepalive.pid" ]; then
            kill "$(cat "$dir/keepalive.pid")" 2>/dev/null
            rm -f "$dir/keepalive.pid"
        fi
        if [ -f "$dir/pid" ]; then
            local pid; pid="$(cat "$dir/pid")"
            kill "$pid" 2>/dev/null
            local i
            for i in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
            kill -9 "$pid" 2>/dev/null
            rm -f "$dir/pid"
            echo "pulse-env: stopped" >&2
        fi
        unset PULSE_SERVER PULSE_RUNTIME_PATH ALSA_CONFIG_PATH VOICEPIPE_PULSE_DIR 2>/dev/null
        ;;
    status)
        if [ -f "$dir/pid" ] && kill -0 "$(cat "$dir/pid")" 2>/dev/null; then
            PULSE_SERVER="unix:$dir/runtime/native" pactl info
        else
            echo "pulse-env: not running" >&2; return 1
        fi
        ;;
    *)
        echo "usage: source scripts/pulse-env.sh start | scripts/pulse-env.sh stop | status" >&2
        return 2
        ;;
    esac
}

# Sourced: run in the caller's shell so the exports stay. Executed: run and exit.
if [ "${BASH_SOURCE[0]}" != "$0" ]; then
    _vp_pulse_main "$@"
else
    _vp_pulse_main "$@"
    exit $?
fi
