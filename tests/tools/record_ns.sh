# Sourced by the netlink recording scripts: the network namespace a fixture node's kernel is
# recorded in, as every recorded node has it: loopback up, and a veth eth0 (peer eth1, both in
# it) with the node address 192.168.50.10/24. Defines nse: run a command in "$ns".
nse() { ip netns exec "$ns" "$@"; }
make_record_ns() {
    ip netns add "$ns"
    nse ip link set lo up
    nse ip link add eth0 type veth peer name eth1
    nse ip addr add 192.168.50.10/24 dev eth0
    nse ip link set eth0 up
}
