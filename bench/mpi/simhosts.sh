#!/bin/sh
# Simulated hosts on one machine (docs/DISTRIBUTED.md, "Simulated hosts"): N network
# namespaces emb_h1 .. emb_hN (addresses 10.77.0.1 .. 10.77.0.N) and Open MPI started across
# them through an rsh agent that enters the right namespace. Needs root (ip netns, ip tuntap).
#
#   bench/mpi/simhosts.sh up N [RATE] [DELAY] [JITTER]
#                                       N hosts (2..8), each with a TUN device emb_tun whose
#                                       packets simnet (bench/mpi/simnet.c) carries to the
#                                       others after DELAY one way, at RATE per host link
#                                       (tc's spelling: 1gbit, 100mbit, or none; DELAY and
#                                       JITTER as 0.1ms, 5ms, 100us; default none and 0)
#   bench/mpi/simhosts.sh net RATE [DELAY] [JITTER]
#                                       restart simnet with another rate and delay
#   bench/mpi/simhosts.sh up --veth [RATE]
#                                       two hosts joined by a veth pair instead, each end's
#                                       egress limited by a tbf qdisc (no delay)
#   bench/mpi/simhosts.sh rate RATE     --veth only: change the tbf limit (or "none")
#   bench/mpi/simhosts.sh run NP CMD... mpirun -np NP CMD across the hosts, ranks round-robin
#   bench/mpi/simhosts.sh down          stop simnet, remove the devices, namespaces and files
#                                       that `up` made (nothing else)
#
# simnet is $SIMNET, else $EMB_BUILD_DIR/bench/simnet (default build/). $SIMHOSTS_MTU is the
# TUN devices' MTU (9000, jumbo frames: at 1500 a loaded 2-core machine forwards less than
# 1 Gbit/s); simnet runs at niceness $SIMHOSTS_NICE (-10); $SIMHOSTS_LIMIT is each
# destination's queue in packets (simnet's --limit, default 1000). bench/mpi/simhosts_check.py
# measures what the network does (ping and a TCP transfer).
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
STATE=${TMPDIR:-/tmp}/emb-simhosts
SIMNET=${SIMNET:-${EMB_BUILD_DIR:-$ROOT/build}/bench/simnet}
MTU=${SIMHOSTS_MTU:-9000}
NICE=${SIMHOSTS_NICE:--10} # a network that waits for a CPU adds delay
LIMIT=${SIMHOSTS_LIMIT:-1000}
cmd=${1:-}
[ $# -gt 0 ] && shift

limit() { # limit RATE: tbf on both veth ends' egress (none: no qdisc)
    for end in "emb_h1 emb_v1" "emb_h2 emb_v2"; do
        ns=${end% *} dev=${end#* }
        tc -n "$ns" qdisc del dev "$dev" root 2>/dev/null || true
        [ "$1" = none ] || tc -n "$ns" qdisc add dev "$dev" root tbf rate "$1" burst 256kb latency 50ms
    done
}

hosts() { cat "$STATE/netns"; }

stop_simnet() {
    [ -f "$STATE/simnet.pid" ] || return 0
    pid=$(cat "$STATE/simnet.pid")
    rm -f "$STATE/simnet.pid"
    kill -TERM "$pid" 2>/dev/null || return 0
    i=0
    while kill -0 "$pid" 2>/dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
    if kill -0 "$pid" 2>/dev/null; then echo "simhosts: simnet $pid did not stop" >&2; return 1; fi
    tail -n "$(($(wc -l < "$STATE/netns") + 1))" "$STATE/simnet.log" >&2 || true
}

start_simnet() { # start_simnet RATE DELAY JITTER
    [ -x "$SIMNET" ] || { echo "simhosts: no simnet at $SIMNET (cmake --build build --target simnet)" >&2; return 1; }
    # shellcheck disable=SC2046
    setsid nice -n "$NICE" "$SIMNET" --rate "$1" --delay "$2" --jitter "$3" --seed 1 --mtu "$MTU" \
        --limit "$LIMIT" --pidfile "$STATE/simnet.pid.new" $(hosts) > "$STATE/simnet.log" 2>&1 < /dev/null &
    i=0
    while [ ! -s "$STATE/simnet.pid.new" ] && [ $i -lt 100 ]; do
        kill -0 $! 2>/dev/null || { cat "$STATE/simnet.log" >&2; return 1; }
        sleep 0.05
        i=$((i + 1))
    done
    [ -s "$STATE/simnet.pid.new" ] || { echo "simhosts: simnet did not start" >&2; return 1; }
    mv "$STATE/simnet.pid.new" "$STATE/simnet.pid"
    echo "rate $1 delay $2 jitter $3" > "$STATE/net"
}

# shellcheck disable=SC2016
make_agent() { # the rsh agent: [options] HOST COMMAND... runs COMMAND in HOST's namespace
    {
        printf '#!/bin/sh\nwhile [ $# -gt 0 ]; do case "$1" in -*) shift;; *) break;; esac; done\n'
        printf 'case "$1" in\n'
        k=1
        for ns in $(hosts); do printf '10.77.0.%d) ns=%s;;\n' $k "$ns"; k=$((k + 1)); done
        printf '*) echo "agent: unknown host $1" >&2; exit 1;;\nesac\nshift\n'
        printf 'exec ip netns exec $ns sh -c "$*"\n'
    } > "$STATE/agent"
    chmod +x "$STATE/agent"
}

case "$cmd" in net | rate | run)
    [ -f "$STATE/netns" ] || { echo "simhosts: not up (no $STATE)" >&2; exit 1; } ;;
esac

case "$cmd" in
up)
    [ -e "$STATE" ] && { echo "simhosts: already up ($STATE exists)" >&2; exit 1; }
    if [ "${1:-}" = --veth ]; then
        mkdir -p "$STATE"
        echo veth > "$STATE/mode"
        printf 'emb_h1\nemb_h2\n' > "$STATE/netns"
        ip netns add emb_h1
        ip netns add emb_h2
        ip link add emb_v1 type veth peer name emb_v2
        ip link set emb_v1 netns emb_h1
        ip link set emb_v2 netns emb_h2
        ip -n emb_h1 addr add 10.77.0.1/24 dev emb_v1
        ip -n emb_h2 addr add 10.77.0.2/24 dev emb_v2
        for n in emb_h1 emb_h2; do ip -n $n link set lo up; done
        ip -n emb_h1 link set emb_v1 up
        ip -n emb_h2 link set emb_v2 up
        limit "${2:-none}"
    else
        n=${1:-}
        case "$n" in [2-8]) ;; *) echo "simhosts: up N: N is 2 to 8" >&2; exit 2;; esac
        mkdir -p "$STATE"
        echo hub > "$STATE/mode"
        : > "$STATE/netns"
        for k in $(seq 1 "$n"); do
            ns=emb_h$k
            ip netns add "$ns"
            echo "$ns" >> "$STATE/netns"
            ip -n "$ns" link set lo up
            ip -n "$ns" tuntap add dev emb_tun mode tun
            ip netns exec "$ns" sysctl -qw net.ipv6.conf.emb_tun.disable_ipv6=1
            ip -n "$ns" link set emb_tun mtu "$MTU"
            ip -n "$ns" addr add "10.77.0.$k/24" dev emb_tun
            ip -n "$ns" link set emb_tun up
        done
        start_simnet "${2:-none}" "${3:-0}" "${4:-0}"
    fi
    make_agent
    for ip in $(seq -f '10.77.0.%g' 1 "$(wc -l < "$STATE/netns")"); do echo "$ip slots=64"; done > "$STATE/hosts"
    ;;
net)
    [ "$(cat "$STATE/mode")" = hub ] || { echo "simhosts: net needs the hosts of 'up N'" >&2; exit 2; }
    stop_simnet
    start_simnet "$1" "${2:-0}" "${3:-0}"
    ;;
rate)
    [ "$(cat "$STATE/mode")" = veth ] || { echo "simhosts: rate is for 'up --veth'; use net" >&2; exit 2; }
    limit "$1"
    ;;
run)
    OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
    export OMP_NUM_THREADS
    np=$1
    shift
    hl=$(seq -f '10.77.0.%g:64' 1 "$(wc -l < "$STATE/netns")" | paste -sd,)
    ip netns exec emb_h1 mpirun -np "$np" --host "$hl" --map-by node --oversubscribe \
        --mca plm_rsh_agent "$STATE/agent" --mca btl tcp,self \
        --mca btl_tcp_if_include 10.77.0.0/24 --mca oob_tcp_if_include 10.77.0.0/24 \
        -x OMP_NUM_THREADS "$@"
    ;;
down)
    [ -e "$STATE" ] || exit 0
    stop_simnet || true
    for ns in $(hosts); do
        ip -n "$ns" link del emb_tun 2>/dev/null || true
        ip netns del "$ns" 2>/dev/null || true # (deletes its veth end too)
    done
    rm -rf "$STATE"
    ;;
*)
    sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
