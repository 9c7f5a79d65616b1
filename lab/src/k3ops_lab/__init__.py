"""The k3ops lab: a simulated GPU fleet on one machine, on which k3ops's deploys, checks, upgrades and drills
rehearse before they touch production.

Hosts are systemd-nspawn containers or QEMU VMs in network namespaces on a bridge of their own, with the
controller's apt proxy, signed repositories of simulated vendor packages, a Hub, a registry and a
wheelhouse; simulated hardware and vendor tools (sim/, copied onto every host as `labsim`) and stand-in
kernel modules (kmod/). A distribution of its own (k3ops-lab) so that an installed k3ops carries none of
it: the lab imports k3ops, never the other way round, and adds `k3ops lab` through the `k3ops.commands`
entry points.
"""
