#!/usr/bin/env bash
# Two network namespaces joined by a veth pair, for testing peer discovery (mDNS/DNS-SD) and the
# intercom pipeline between two "hosts" on one machine. Needs root (CAP_NET_ADMIN + CAP_SYS_ADMIN).
#
#   scripts/netns-pair.sh up       create (idempotent): namespaces, veth, addresses, multicast route
#   scripts/netns-pair.sh down     remove (idempotent): deleting a namespace deletes its veth end
#   scripts/netns-pair.sh status   show both namespaces' links, addresses and routes
#   scripts/netns-pair.sh check    verify IPv4 unicast and mDNS multicast (224.0.0.251:5353) pass A -> B
#
# Run something inside one side:  ip netns exec vp-a <command>
#
# Environment (defaults in brackets):
#   NS_A [vp-a]  NS_B [vp-b]                  namespace names
#   IF_A [veth-<NS_A>]  IF_B [veth-<NS_B>]    interface names (at most 15 characters)
#   ADDR_A [10.77.0.1/24]  ADDR_B [10.77.0.2/24]
#   ADDR6_A [fd77::1/64]   ADDR6_B [fd77::2/64]  (IPv6 link-local fe80:: addresses come on their own)
set -euo pipefail

NS_A=${NS_A:-vp-a}
NS_B=${NS_B:-vp-b}
IF_A=${IF_A:-veth-$NS_A}
IF_B=${IF_B:-veth-$NS_B}
ADDR_A=${ADDR_A:-10.77.0.1/24}
ADDR_B=${ADDR_B:-10.77.0.2/24}
ADDR6_A=${ADDR6_A:-fd77::1/64}
ADDR6_B=${ADDR6_B:-fd77::2/64}

die() { echo "netns-pair: $*" >&2; exit 1; }
ns_exists() { ip netns list 2>/dev/null | awk '{print $1}' | grep -qx "$1"; }
nsx() { local ns=$1; shift; ip netns exec "$ns" "$@"; }
# python3 inside a namespace; ip netns exec keeps the environment, so pyenv shims still resolve.
PY=${PYTHON:-python3}

setup_side() { # ns ifname addr4 addr6
    local ns=$1 ifn=$2 a4=$3 a6=$4
    nsx "$ns" ip link set lo up
    # No duplicate-address detection: link-local and static IPv6 addresses usable at once.
    nsx "$ns" sysctl -qw "net.ipv6.conf.$ifn.accept_dad=0" 2>/dev/null || true
    nsx "$ns" ip addr replace "$a4" dev "$ifn"
    nsx "$ns" ip -6 addr replace "$a6" dev "$ifn" nodad 2>/dev/null || true
    nsx "$ns" ip link set "$ifn" multicast on up
    # Without a route for 224.0.0.0/4 a socket that neither sets IP_MULTICAST_IF nor joins on a
    # named interface gets ENETUNREACH (there is no default route in the namespace).
    nsx "$ns" ip route replace 224.0.0.0/4 dev "$ifn"
}

cmd_up() {
    [ "$(id -u)" = 0 ] || die "must run as root"
    for ns in "$NS_A" "$NS_B"; do
        ns_exists "$ns" || ip netns add "$ns" || die "ip netns add $ns failed (needs CAP_SYS_ADMIN and a writable /run/netns)"
    done
    if ! nsx "$NS_A" ip link show "$IF_A" >/dev/null 2>&1; then
        # A half-made pair (one end left in the root namespace) is removed first.
        ip link del "$IF_A" 2>/dev/null || true
        ip link del "$IF_B" 2>/dev/null || true
        nsx "$NS_B" ip link del "$IF_B" 2>/dev/null || true
        ip link add "$IF_A" netns "$NS_A" type veth peer name "$IF_B" netns "$NS_B"
    fi
    setup_side "$NS_A" "$IF_A" "$ADDR_A" "$ADDR6_A"
    setup_side "$NS_B" "$IF_B" "$ADDR_B" "$ADDR6_B"
    echo "netns-pair: $NS_A ($IF_A ${ADDR_A%/*}) <-> $NS_B ($IF_B ${ADDR_B%/*}) up"
}

cmd_down() {
    for ns in "$NS_A" "$NS_B"; do
        if ns_exists "$ns"; then
            # Processes still inside keep the namespace alive but lose its name; say which.
            local pids
            pids=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')
            [ -z "$pids" ] || echo "netns-pair: note: processes still in $ns: $pids" >&2
            ip netns del "$ns"
        fi
    done
    ip link del "$IF_A" 2>/dev/null || true
    echo "netns-pair: $NS_A, $NS_B down"
}

cmd_status() {
    for ns in "$NS_A" "$NS_B"; do
        echo "== $ns"
        if ns_exists "$ns"; then
            nsx "$ns" ip -br addr
            nsx "$ns" ip route
            nsx "$ns" ip -6 route show table all | grep -v '^local\|^broadcast' || true
        else
            echo "(absent)"
        fi
    done
}

cmd_check() {
    ns_exists "$NS_A" && ns_exists "$NS_B" || die "namespaces not up; run: $0 up"
    # A receiver in B: UDP unicast on its address, and mDNS multicast 224.0.0.251:5353 joined the way
    # an mDNS responder does (SO_REUSEADDR + SO_REUSEPORT, so it coexists with an avahi-daemon).
    # A sender in A sends both. (The base image has no ping, so python3 does both sides.)
    local out rx ok=0
    out=$(mktemp)
    nsx "$NS_B" env ADDR="${ADDR_B%/*}" "$PY" - >"$out" 2>&1 <<'EOF' &
import os, select, socket, struct, time
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.bind((os.environ["ADDR"], 5999))
m = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
m.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
m.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
m.bind(("0.0.0.0", 5353))
m.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP,
             struct.pack("4s4s", socket.inet_aton("224.0.0.251"), socket.inet_aton("0.0.0.0")))
print("ready", flush=True)
seen, end = set(), time.time() + 5
while len(seen) < 2 and time.time() < end:
    r, _, _ = select.select([u, m], [], [], 0.2)
    for s in r:
        data, src = s.recvfrom(9000)
        if data == b"netns-pair-check":
            kind = "unicast" if s is u else "multicast"
            if kind not in seen:
                print("got", kind, "from", src[0], flush=True)
            seen.add(kind)
print("done" if len(seen) == 2 else "timeout", flush=True)
EOF
    rx=$!
    for _ in $(seq 50); do grep -q ready "$out" 2>/dev/null && break; sleep 0.1; done
    nsx "$NS_A" env ADDR="${ADDR_B%/*}" "$PY" - <<'EOF'
import os, socket, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 255)
for _ in range(3):
    s.sendto(b"netns-pair-check", (os.environ["ADDR"], 5999))
    s.sendto(b"netns-pair-check", ("224.0.0.251", 5353))
    time.sleep(0.1)
EOF
    wait "$rx" || true
    grep -q '^got unicast' "$out" && echo "ok: unicast $NS_A -> ${ADDR_B%/*}:5999" || ok=1
    grep -q '^got multicast' "$out" && echo "ok: multicast $NS_A -> 224.0.0.251:5353, received in $NS_B" || ok=1
    if [ $ok -ne 0 ]; then cat "$out" >&2; rm -f "$out"; die "check failed"; fi
    rm -f "$out"
}

case "${1:-}" in
    up) cmd_up ;;
    down) cmd_down ;;
    status) cmd_status ;;
    check) cmd_check ;;
    *) echo "usage: $0 up|down|status|check" >&2; exit 2 ;;
esac
