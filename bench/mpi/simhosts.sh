#!/bin/sh
# Two simulated hosts on one machine (docs/DISTRIBUTED.md, "Simulated hosts"): network
# namespaces emb_h1 and emb_h2 joined by a veth pair (10.77.0.1 and 10.77.0.2), each end's
# egress optionally limited by a tbf qdisc, and Open MPI started across them through an rsh
# agent that enters the other namespace. Needs root (ip netns, tc).
#
#   bench/mpi/simhosts.sh up [RATE]     create them; RATE as tc writes it (1gbit, 100mbit)
#   bench/mpi/simhosts.sh rate RATE     change the limit (or "none")
#   bench/mpi/simhosts.sh run NP CMD... mpirun -np NP CMD across them (ranks alternate hosts)
#   bench/mpi/simhosts.sh down          remove the namespaces, the pair and the agent script
#
# Only what `up` created is removed. Latency is not simulated: it needs tc's netem qdisc (or
# fq, for delays set by a BPF program), which kernels without CONFIG_NET_SCH_NETEM /
# CONFIG_NET_SCH_FQ lack.
set -eu
NS1=emb_h1 NS2=emb_h2 IP1=10.77.0.1 IP2=10.77.0.2
STATE=${TMPDIR:-/tmp}/emb-simhosts
cmd=${1:-}
[ $# -gt 0 ] && shift

limit() { # limit RATE: tbf on both ends' egress (none: no qdisc)
    rate=$1
    for end in "$NS1 emb_v1" "$NS2 emb_v2"; do
        ns=${end% *} dev=${end#* }
        tc -n "$ns" qdisc del dev "$dev" root 2>/dev/null || true
        [ "$rate" = none ] || tc -n "$ns" qdisc add dev "$dev" root tbf rate "$rate" burst 256kb latency 50ms
    done
}

case "$cmd" in
up)
    [ -e "$STATE" ] && { echo "simhosts: already up ($STATE exists)" >&2; exit 1; }
    mkdir -p "$STATE"
    ip netns add $NS1
    ip netns add $NS2
    ip link add emb_v1 type veth peer name emb_v2
    ip link set emb_v1 netns $NS1
    ip link set emb_v2 netns $NS2
    ip -n $NS1 addr add $IP1/24 dev emb_v1
    ip -n $NS2 addr add $IP2/24 dev emb_v2
    for n in $NS1 $NS2; do ip -n $n link set lo up; done
    ip -n $NS1 link set emb_v1 up
    ip -n $NS2 link set emb_v2 up
    limit "${1:-none}"
    cat > "$STATE/agent" <<AGENT
#!/bin/sh
# rsh agent for Open MPI: [options] HOST COMMAND... runs COMMAND in HOST's namespace
while [ \$# -gt 0 ]; do case "\$1" in -*) shift;; *) break;; esac; done
case "\$1" in $IP1) ns=$NS1;; $IP2) ns=$NS2;; *) echo "agent: unknown host \$1" >&2; exit 1;; esac
shift
exec ip netns exec \$ns sh -c "\$*"
AGENT
    chmod +x "$STATE/agent"
    printf '%s slots=64\n%s slots=64\n' $IP1 $IP2 > "$STATE/hosts"
    ;;
rate) limit "$1" ;;
run)
    OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
    export OMP_NUM_THREADS
    np=$1
    shift
    ip netns exec $NS1 mpirun -np "$np" --host "$IP1:64,$IP2:64" --map-by node --oversubscribe \
        --mca plm_rsh_agent "$STATE/agent" --mca btl tcp,self \
        --mca btl_tcp_if_include 10.77.0.0/24 --mca oob_tcp_if_include 10.77.0.0/24 \
        -x OMP_NUM_THREADS "$@"
    ;;
down)
    ip netns del $NS1 2>/dev/null || true # deleting a namespace deletes its end of the pair
    ip netns del $NS2 2>/dev/null || true
    rm -rf "$STATE"
    ;;
*)
    sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
