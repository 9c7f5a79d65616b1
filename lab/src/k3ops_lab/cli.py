"""`k3ops lab up|build|status|ssh|link|fault|down`: the simulated GPU fleet on this machine.

The k3ops command adds this verb through the lab's `k3ops.commands` entry point (lab/pyproject.toml): an
installed k3ops without the lab has no `lab` verb."""

from __future__ import annotations

import argparse
import json
import os
import sys

from k3ops.cli.output import add_json_flag, print_rows

LAB_HOST_COLUMNS = [("HOST", lambda row: row["name"]), ("PROFILE", lambda row: row["profile"]),
                    ("BACKEND", lambda row: row["backend"]), ("ADDRESS", lambda row: row["address"]), ("STATE", lambda row: row["state"])]


def register(verbs) -> None:
    lab = verbs.add_parser("lab", help="a simulated GPU fleet on this machine")
    commands = lab.add_subparsers(dest="lab_command", required=True)

    up = commands.add_parser("up", help="start lab hosts (reuses a running lab with the same profiles)")
    up.add_argument("--hosts", type=int, default=2, help="number of hosts (default 2)")
    up.add_argument("--profile", action="append", metavar="NAME",
                    help="hardware profile for the next host, in order (repeatable); the rest get h200x8")
    up.add_argument("--backend", action="append", choices=("container", "vm"),
                    help="what runs the hosts: container (systemd-nspawn, the default) or vm (QEMU, its own kernel); "
                         "once for every host, or once per host in order")
    up.add_argument("--nvme-devices", type=int, metavar="N",
                    help="NVMe devices per host instead of the profile's (more than one: vm backend, for RAID0)")
    up.add_argument("--nvme-size-gib", type=int, default=8, help="size of each simulated NVMe device (sparse)")
    up.set_defaults(handler=lab_up, parser=up)

    build = commands.add_parser("build", help="build the lab's cached images, repositories and tools; start nothing")
    build.add_argument("--vm", action="store_true", help="also the VM hosts' disk image")
    build.set_defaults(handler=lab_build)

    status = commands.add_parser("status", help="list the lab hosts and their state")
    add_json_flag(status)
    status.set_defaults(handler=lab_status)

    ssh = commands.add_parser("ssh", help="run a command as root on a lab host (a shell without one)")
    ssh.add_argument("host")
    ssh.add_argument("command", nargs=argparse.REMAINDER)
    ssh.set_defaults(handler=lab_ssh)

    link = commands.add_parser("link", help="cut a lab host's network link, or restore it (fault drills)")
    link.add_argument("host")
    link.add_argument("state", choices=("up", "down"))
    link.set_defaults(handler=lab_link)

    delay = commands.add_parser("boot-delay", help="how long a container host stays off when it reboots (its "
                                                   "firmware; minutes on bare metal, a few seconds by default)")
    delay.add_argument("host")
    delay.add_argument("seconds", type=float)
    delay.set_defaults(handler=lab_boot_delay)

    fault = commands.add_parser("fault", help="inject a runbook's fault into a lab host, or clear them (drills)")
    fault.add_argument("host", nargs="?")
    fault.add_argument("fault", nargs="?", help="the fault's name (see --list)")
    fault.add_argument("--list", action="store_true", help="list the faults, with the runbook each drills")
    fault.add_argument("--clear", action="store_true", help="undo every fault injected into HOST")
    fault.set_defaults(handler=lab_fault, parser=fault)

    down = commands.add_parser("down", help="stop the lab and remove all it made (idempotent)")
    down.set_defaults(handler=lab_down)


def lab_up(args) -> int:
    from . import lab

    if args.hosts < 1:
        args.parser.error("--hosts must be at least 1")
    started = lab.up(args.hosts, args.profile or [], nvme_size_gib=args.nvme_size_gib, backends=args.backend,
                     nvme_devices=args.nvme_devices)
    for host in started.hosts:
        print(f"{host.name}\t{host.profile}\t{host.backend}\t{host.address}")
    return 0


def lab_build(args) -> int:
    from . import lab

    lab.build(with_vm=args.vm)
    return 0


def lab_status(args) -> int:
    from . import lab

    hosts = lab.status()
    if args.json:
        print(json.dumps({"hosts": hosts}))
    elif not hosts:
        print("no lab is up")
    else:
        print_rows(hosts, LAB_HOST_COLUMNS)
    return 0


def lab_host(verb: str, name: str):
    """The running lab's host of that name, or None after saying why on stderr."""
    from . import state

    current = state.load()
    if current is None:
        print(f"k3ops lab {verb}: no lab is up (run `k3ops lab up`)", file=sys.stderr)
        return None
    try:
        return current.host(name)
    except KeyError as error:
        print(f"k3ops lab {verb}: {error.args[0]}", file=sys.stderr)
        return None


def lab_ssh(args) -> int:
    from . import state

    host = lab_host("ssh", args.host)
    if host is None:
        return 2
    command = state.ssh_command(host, args.command)
    if sys.stdin.isatty() and not args.command:
        command.insert(1, "-t")
    os.execvp(command[0], command)


def lab_link(args) -> int:
    from . import network

    host = lab_host("link", args.host)
    if host is None:
        return 2
    network.set_link(host, args.state == "up")
    print(f"{host.name}: link {args.state}")
    return 0


def lab_boot_delay(args) -> int:
    from . import container

    host = lab_host("boot-delay", args.host)
    if host is None:
        return 2
    if host.backend != "container" or not 0 <= args.seconds <= 3600:
        print("k3ops lab boot-delay: a container host, and 0 to 3600 seconds", file=sys.stderr)
        return 2
    container.paths(host)["boot-delay"].write_text(f"{args.seconds}\n")
    print(f"{host.name}: stays off {args.seconds:g} s when it reboots")
    return 0


def lab_fault(args) -> int:
    from . import faults

    if args.list:
        if args.host or args.clear:
            args.parser.error("--list takes no host and no --clear")
        print_rows([{"fault": fault.name, "runbook": fault.runbook, "what": fault.description}
                    for fault in faults.FAULTS.values()],
                   [("FAULT", lambda row: row["fault"]), ("RUNBOOK", lambda row: row["runbook"]),
                    ("WHAT IT SIMULATES", lambda row: row["what"])])
        return 0
    if not args.host or bool(args.fault) == args.clear:
        args.parser.error("give HOST FAULT, HOST --clear, or --list")
    host = lab_host("fault", args.host)
    if host is None:
        return 2
    try:
        if args.clear:
            cleared = faults.clear(host)
            print(f"{host.name}: cleared {', '.join(cleared) or 'nothing (no fault injected)'}")
        else:
            faults.inject(host, args.fault)
            print(f"{host.name}: {args.fault} injected ({faults.FAULTS[args.fault].description})")
    except faults.FaultError as error:
        print(f"k3ops lab fault: {error}", file=sys.stderr)
        return 2
    return 0


def lab_down(args) -> int:
    from . import lab

    lab.down()
    return 0
