#!/usr/bin/env bash
# A private D-Bus system bus and avahi-daemon inside one network namespace, so that two namespaces
# (scripts/netns-pair.sh) each have their own mDNS responder for discovery tests. Needs root.
#
#   scripts/netns-avahi.sh start NS [IFACE]   start dbus-daemon + avahi-daemon in NS (idempotent);
#                                             IFACE limits avahi to one interface (allow-interfaces)
#   scripts/netns-avahi.sh stop NS            stop both (avahi first: SIGTERM sends goodbye packets)
#   scripts/netns-avahi.sh kill NS            SIGKILL avahi-daemon (no goodbye), then stop the bus
#   scripts/netns-avahi.sh status NS
#   scripts/netns-avahi.sh env NS             print the export line for clients
#   scripts/netns-avahi.sh exec NS CMD...     run CMD in NS, talking to that namespace's avahi-daemon
#
# e.g.  scripts/netns-pair.sh up
#       scripts/netns-avahi.sh start vp-a veth-vp-a; scripts/netns-avahi.sh start vp-b veth-vp-b
#       scripts/netns-avahi.sh exec vp-a avahi-publish -s "intercom vp-a" _voicepipe-intercom._udp 5006 &
#       scripts/netns-avahi.sh exec vp-b avahi-browse -rpt _voicepipe-intercom._udp
#
# How: each namespace gets a bus whose socket is $RUN_DIR/NS/system_bus_socket. Clients (avahi-client,
# libdbus) and avahi-daemon itself honour DBUS_SYSTEM_BUS_ADDRESS, and a path-named unix socket is
# reachable from any network namespace. avahi-daemon's pid file and socket are fixed at
# /run/avahi-daemon/, so each avahi-daemon runs with a tmpfs over that directory, mounted inside the
# private mount namespace that `ip netns exec` already creates for the command it runs.
set -euo pipefail

RUN_DIR=${VP_NETNS_RUN:-/run/voicepipe-netns}
die() { echo "netns-avahi: $*" >&2; exit 1; }
alive() { [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null; }
readpid() { cat "$1" 2>/dev/null || true; }

ns=${2:-}
[ -n "${1:-}" ] || { sed -n '2,14p' "$0" >&2; exit 2; }
[ -n "$ns" ] || die "namespace name missing"
dir=$RUN_DIR/$ns
bus="unix:path=$dir/system_bus_socket"

start() {
    local iface=${1:-}
    [ "$(id -u)" = 0 ] || die "must run as root"
    ip netns list | awk '{print $1}' | grep -qx "$ns" || die "no network namespace $ns (scripts/netns-pair.sh up)"
    command -v avahi-daemon >/dev/null && command -v dbus-daemon >/dev/null \
        || die "avahi-daemon and dbus-daemon needed (apt-get install avahi-daemon avahi-utils dbus)"
    mkdir -p "$dir"; chmod 755 "$RUN_DIR" "$dir"

    if ! alive "$(readpid "$dir/dbus.pid")"; then
        rm -f "$dir/system_bus_socket"
        cat >"$dir/dbus.conf" <<EOF
<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-BUS Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>$bus</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
  </policy>
</busconfig>
EOF
        ip netns exec "$ns" dbus-daemon --config-file="$dir/dbus.conf" --fork --print-pid=3 \
            3>"$dir/dbus.pid" >/dev/null
        for _ in $(seq 50); do [ -S "$dir/system_bus_socket" ] && break; sleep 0.1; done
        [ -S "$dir/system_bus_socket" ] || die "dbus-daemon in $ns did not come up"
    fi

    if ! alive "$(readpid "$dir/avahi.pid")"; then
        cat >"$dir/avahi.conf" <<EOF
[server]
host-name=$ns
domain-name=local
use-ipv4=yes
use-ipv6=yes
${iface:+allow-interfaces=$iface}
enable-dbus=yes
ratelimit-interval-usec=1000000
ratelimit-burst=1000
[wide-area]
enable-wide-area=no
[publish]
publish-hinfo=no
publish-workstation=no
[reflector]
[rlimits]
EOF
        : >"$dir/avahi.log"
        # ip netns exec does not fork, and sh execs avahi-daemon: $! is avahi-daemon's pid.
        DBUS_SYSTEM_BUS_ADDRESS=$bus nohup ip netns exec "$ns" sh -c '
            mkdir -p /run/avahi-daemon &&
            mount -t tmpfs -o mode=0755 tmpfs /run/avahi-daemon &&
            exec avahi-daemon -f "$1" --no-chroot --no-rlimits --no-proc-title' sh "$dir/avahi.conf" \
            >>"$dir/avahi.log" 2>&1 </dev/null &
        echo $! >"$dir/avahi.pid"
        # Ready when the host name has been probed and announced (about 1 s).
        for _ in $(seq 100); do
            grep -q 'Server startup complete' "$dir/avahi.log" && break
            alive "$(readpid "$dir/avahi.pid")" || { cat "$dir/avahi.log" >&2; die "avahi-daemon in $ns exited"; }
            sleep 0.1
        done
        grep -q 'Server startup complete' "$dir/avahi.log" || { cat "$dir/avahi.log" >&2; die "avahi-daemon in $ns not ready"; }
    fi
    echo "netns-avahi: $ns: dbus $(readpid "$dir/dbus.pid"), avahi-daemon $(readpid "$dir/avahi.pid"); $(grep -o 'Host name is [^ ]*' "$dir/avahi.log" | tail -1)"
}

stop_pid() { # pidfile signal
    local pid; pid=$(readpid "$1")
    if alive "$pid"; then
        kill "-$2" "$pid" 2>/dev/null || true
        for _ in $(seq 50); do alive "$pid" || break; sleep 0.1; done
        alive "$pid" && kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$1"
}

stop() { # avahi signal
    stop_pid "$dir/avahi.pid" "$1"
    stop_pid "$dir/dbus.pid" TERM
    rm -f "$dir/system_bus_socket"
    echo "netns-avahi: $ns stopped"
}

case "$1" in
    start) start "${3:-}" ;;
    stop) stop TERM ;;
    kill) stop KILL ;;
    status)
        alive "$(readpid "$dir/dbus.pid")" && echo "dbus-daemon $(readpid "$dir/dbus.pid") ($bus)" || echo "dbus-daemon: not running"
        alive "$(readpid "$dir/avahi.pid")" && echo "avahi-daemon $(readpid "$dir/avahi.pid")" || echo "avahi-daemon: not running" ;;
    env) echo "export DBUS_SYSTEM_BUS_ADDRESS=$bus" ;;
    exec)
        shift 2
        [ $# -gt 0 ] || die "command missing"
        exec env DBUS_SYSTEM_BUS_ADDRESS="$bus" ip netns exec "$ns" "$@" ;;
    *) die "unknown subcommand $1" ;;
esac
