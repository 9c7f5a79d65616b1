"""all_reduce_perf and alltoall_perf of nccl-tests 2.17.6 (NCCL 2.28.7) and of rccl-tests, on the lab's hardware.

Reports are printed with the tools' own format strings: nccl-tests' src/util.cu at v2.17.6, and two
rccl-tests builds, told apart by the build their package records (vendor_repo.RCCL_TESTS_BUILDS): ROCm 6.4's
prints as rccl-tests' src/common.cpp does in the real MI355X capture (`rccl-tests: Version <branch>:<commit>`
after the nThread line, rows with two decimals, "Errors with asterisks" in the footer); ROCm 7.0's is merged
with nccl-tests 2.17 and prints nccl-tests' report under `# rccl-tests version 2.17.9-<branch>:<commit>
rccl-headers=N rccl-library=N`. The numbers come from the model below instead of a measurement, so they are
the same at every run.

One process drives `-t` x `-g` GPUs of its host. Under the real OpenMPI `mpirun`, one process per host
(`mpirun --host gpu-01:1,gpu-02:1 /usr/bin/all_reduce_perf -b 1G -e 8G -f 2 -g 8`; rccl-tests' binaries
are in /opt/rocm/bin), each process reads only its own host (/etc/k3ops-lab/hardware.json and the driver state, as
SimHost does), mpi4py (Debian's python3-mpi4py) gathers every rank's `RankView` to rank 0, rank 0 prints
`report()` of them all, with a device line for every GPU of every host, and broadcasts the exit status,
which every rank exits with. Other ranks print only their own errors, on stderr. Without
OMPI_COMM_WORLD_SIZE, or with 1, it is one process and needs no MPI.

Bandwidth model. A message of S bytes takes latency + S x f / peak, f = 2(n-1)/n for all_reduce and (n-1)/n
for alltoall (nccl-tests doc/PERFORMANCE.md), n the ranks of every host, so busbw tends to `peak`:
  - GPU links of a host: NVIDIA: the fewest active NVLinks of its GPUs x the link speed (H200: 18 x 26.562 =
    478 GB/s; B300, GB300: 18 x 53.125 = 956), or 24 (PCIe and host memory) with none left; AMD: the
    xGMI links x their speed x XGMI_CALIBRATION, which makes 7 x 38.4 GB/s reach capture 07's 406.8 GB/s
    at 8 GiB on 8 MI355X (the lab injects no xGMI link faults). alltoall gets ALLTOALL_SHARE of that:
    AMD 0.887 (capture 07's alltoall, 361.0 against 406.9), NVIDIA 0.764 (no NVLink SHARP: 8xH200
    all_gather 361.4 against all_reduce 473.1, ml-engineering network/README.md).
  - One host: its GPU links, unless the run disables both of NCCL's on-host transports (below). Hosts of one
    NVLink domain (gb300x4 trays of one cluster_uuid): the traffic
    stays on NVLink, so the lowest host's GPU links.
  - Other hosts meet over their NICs' Active ports, and the slowest host sets the pace, capped by GPU links:
      all_reduce: ports (one per GPU at most) x the slowest port's Gb/s / 8 x 0.95 x GDR x share
      alltoall:   the slowest port's Gb/s / 8 x 0.95 x GDR x share / GPUs per port: "Alltoall cannot
                  aggregate the bandwidth of multiple NICs" (sjeaugey, nccl-tests#267), so one NIC's
                  figure, halved when a port down makes two GPUs share one
    GDR is 1, or 0.65 on an NVIDIA host whose nvidia_peermem is not live: NCCL then stages through host
    memory (sjeaugey, nccl#412: 16 instead of 24 GB/s; nccl#638: "should ~halve the performance"); AMD
    always has it (ROCm peer memory is in amdgpu). `share` is the host's "nic_throughput_share" fault.
    A host with no Active port leaves NCCL its socket transport: SOCKET_BUS_BANDWIDTH.
  - NIC loopback: a run on one host (no MPI, or OMPI_COMM_WORLD_SIZE=1) whose environment sets both
    NCCL_P2P_DISABLE and NCCL_SHM_DISABLE to a non-zero integer leaves NCCL neither NVLink/xGMI peer access
    nor shared memory, so its ring goes out through each GPU's NIC to the switch and back in. Azure's node
    health checks use it to test the NICs without a peer ("IB loopback": NHC's nd96asr_v4 config runs
    all_reduce_perf with NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 and expects 18 GB/s at 8 GB on 8x HDR 200G;
    research fleet-ops.md B2, B3). all_reduce and alltoall then both get the alltoall per-NIC figure above
    (GDR, share, halved by a port down; SOCKET_BUS_BANDWIDTH with no Active port), with no cap by the GPU
    links: NVLink faults do not show. With one of the two alone, or over several hosts, nothing changes.
At 8 GiB that gives (GB/s, the lower of out-of-place and in-place; all_reduce / alltoall):
  one host: h200x8 477.9 / 365.1, b300x8 955.5 / 729.7, gb300x4 955.3 / 729.4, mi355x8 406.8 / 360.7;
            h200x8 with 1, 2 or 9 NVLinks down on one GPU 451.4, 424.9, 239.0
  two 8x400G hosts (h200x8 or mi355x8): healthy 379.8 / 47.5; one of them with a port Down 332.4 / 23.75,
            a port at 200 Gb/s 190.0 / 23.75, a 0.5 share 190.0 / 23.75, no Active port 3.0 / 3.0, and on
            h200x8 without GPUDirect RDMA 246.9 / 30.9; two gb300x4 trays 955.4 / 729.6.
  NIC loopback on one 8x400G host (h200x8, mi355x8), all_reduce and alltoall alike: healthy 47.5, a port Down
            23.75, a port at 200 Gb/s 23.75, a 0.5 share 23.75, h200x8 without GPUDirect RDMA 30.9, no Active
            port 3.0; NVLinks down change nothing.

Faults read from hardware.json: a GPU's "fallen_off_bus" (gone from the count), "nvlink_down_links"
(nvidia_devices.py), a NIC's "port_state" and "rate_gbps" (as ibstat shows them), and
  "nic_throughput_share": 0.5   the host moves only that share over ports that look healthy (a bad cable,
                                a congested leaf port): ibstat shows nothing.

With NCCL_DEBUG set, the library's own lines come between the device list and the table, as in a real run:
RCCL's init warnings on every rank (kernel.numa_balancing on, no iommu=pt on the kernel command line;
time-stamped from RCCL 2.26), NCCL's version line or RCCL's version block on rank 0, and at INFO
"NET/IB : No device found." and "Using network Socket" for a host with no Active port (NCCL logs those at
INFO only; it prints no WARN for that fallback). RCCL records its last warning whatever NCCL_DEBUG says,
and the tests print it last (ncclGetLastError). Only the lines the model has reasons for are printed.

Fault "bootstrap_unreachable": true: the host's firewall drops what comes in to NCCL's bootstrap sockets (SSH
and MPI's own launch still work, and what the host sends out still goes). In a job over several hosts NCCL
then hangs in ncclCommInitRank (bootstrap.cc at v2.28.7-1): every rank sends its address to the root, a
thread of rank 0 listening on its host, and the root connects back to each rank. If the root's host has the
fault, the ranks of every other host cannot reach it (sendToRoot); otherwise the root's thread cannot reach
the first rank of a host with it (rootSend; the sim takes the lowest rank: which one comes first depends on
the order the ranks check in, as does which ring neighbours get as far as to connect, so those are left out).
A dropped SYN makes connect() fail with ETIMEDOUT once the kernel's SYN retransmissions are spent (1 + 2 +
.. + 64 = 127 s at Linux's default net.ipv4.tcp_syn_retries of 6, read from the host), and NCCL retries it
in socketConnectCheck (src/misc/socket.cc): it logs, at INFO (NCCL_NET|NCCL_INIT; nothing at WARN), after
each failure n of NCCL_SOCKET_RETRY_CNT=34, then sleeps n x NCCL_SOCKET_RETRY_SLEEP_MSEC=100 ms:
  <host>:<pid>:<tid> [<dev>] NCCL INFO socketPollConnect: connect to 10.213.7.11<43651> returned Connection
  timed out, retrying (1/34) after sleep for 100 msec
"socketPollConnect" for the ranks' non-blocking sockets (they carry the comm's abort flag), "socketStartConnect"
for the root's blocking one. The wording is NCCL 2.27's and 2.28's; 2.24 to 2.26 (RCCL 2.26.6, ROCm 7.0) print
"connect returned ..." without the peer; before 2.24 (RCCL 2.22.3, ROCm 6.4) a timed-out connect is retried
without a line. RCCL keeps NCCL's socket code (RCCL 2.21.5's socketPollConnect is NCCL 2.21.5's). Each rank
is a thread of its own when a process drives several GPUs (group.cc's asyncJobLaunch), the main thread when
it drives one; the thread ids are stand-ins (pid + 1 for the root's, pid + 2 + the GPU's place for the
others), as are the ephemeral ports (net.ipv4.ip_local_port_range). The peer's address is what its own rank
puts in its view: the IPv4 address of the interface NCCL's ncclFindInterfaces would take (NCCL_SOCKET_IFNAME,
else ib*, else any but docker, lo and virbr), read from the kernel's /proc/net/route and /proc/net/fib_trie:
a lab host has no DNS, and its /etc/hosts maps its own name to 127.0.1.1. Rank 0 prints the report as far as
NCCL's init (header, devices, the library's lines), then every rank blocks until the caller's timeout kills
the job. Real NCCL gives up after the 35th failure (~75 min; RCCL 2.22 after three timeouts, ~6.4 min) and the
test fails; the sim keeps blocking. A job on one host is unaffected: it does not go through the firewall.
"""

from __future__ import annotations

import hashlib
import math
import os
import socket
import struct
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import NoReturn

from . import amdgpu, infiniband, nvidia_devices
from .host import SimHost
from .nvidia_devices import DriverState

NCCL_TESTS_VERSION = "2.17.6"
NCCL_HEADERS_VERSION = "2.28.7"
NCCL_CUDA_VERSION = "13.0"  # the CUDA the lab's libnccl2 (2.28.7-1+cuda13.0) was built with
RCCL_LIBRARY = "opt/rocm/lib/librccl.so.1"
PEERMEM_INITSTATE = "sys/module/nvidia_peermem/initstate"  # written by the boot layer (boot.py) when it loads
KERNEL_COMMAND_LINE = "proc/cmdline"
NUMA_BALANCING = "proc/sys/kernel/numa_balancing"
# What the simulated packages record (vendor_repo.py): RCCL's own version, the rccl-tests build.
RCCL_VERSION_MARKER = "rccl"
RCCL_TESTS_VERSION_MARKER = "rccl-tests"

LATENCY_US = {"nvswitch": 12.0, "nvlink-domain": 14.0, "xgmi": 14.0}
NETWORK_LATENCY_US = {"ib": 10.0, "socket": 100.0}  # added when the ranks span hosts
IN_PLACE_TIME_SHARE = 0.997  # in-place skips one buffer, a hair faster
PCIE_BUS_BANDWIDTH = 24.0  # GB/s NCCL gets through PCIe and host memory when NVLink is gone
XGMI_CALIBRATION = 1.5138  # 7 x 38.4 GB/s x this = 406.9: capture 07's 406.76 GB/s at 8 GiB with 14 us latency
ALLTOALL_SHARE = {"amd": 0.887, "nvidia": 0.764}
NIC_EFFICIENCY = 0.95  # of the line rate that NCCL's IB transport moves
WITHOUT_GPUDIRECT_RDMA = 0.65
SOCKET_BUS_BANDWIDTH = 3.0  # NCCL's socket transport over the hosts' Ethernet
NIC_LOOPBACK_SWITCHES = ("NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE")  # both set: one host's ring goes through its NICs
LINK_LAYERS = ("InfiniBand", "Ethernet")  # the ports NCCL's IB transport takes (RoCE is Ethernet)

DEFAULTS = {"nthreads": 1, "ngpus": 1, "minbytes": 32 << 20, "maxbytes": 32 << 20, "stepbytes": 1 << 20,
            "stepfactor": 1, "iters": 20, "agg_iters": 1, "check": 1, "timeout": 0, "datatype": "float"}
# getopt_long of the tests: short letter and long name of each option taking a value.
OPTIONS = {"t": "nthreads", "g": "ngpus", "b": "minbytes", "e": "maxbytes", "i": "stepbytes", "f": "stepfactor",
           "n": "iters", "m": "agg_iters", "w": "warmup_iters", "c": "check", "T": "timeout", "d": "datatype"}
SIZE_OPTIONS = {"minbytes", "maxbytes", "stepbytes"}
SIZE_SUFFIXES = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
# test_typenames of the tests and each type's size in bytes
DATATYPES = {"int8": 1, "uint8": 1, "int32": 4, "uint32": 4, "int64": 8, "uint64": 8, "half": 2, "float": 4,
             "double": 8, "bfloat16": 2}
COLLECTIVES = {"all_reduce": "sum", "alltoall": "none"}  # and the redop column each prints

# NCCL_DEBUG levels (ncclDebugLogLevel): each prints what the ones below it print.
DEBUG_LEVELS = {"VERSION": 1, "WARN": 2, "INFO": 3, "ABORT": 4, "TRACE": 5}
NCCL_INFO_LINE = "{host}:{pid}:{tid} [{device}] NCCL INFO {message}"
NCCL_VERSION_STRING = "NCCL version {version}+cuda{cuda}"
NO_IB_DEVICE = "NET/IB : No device found."
SOCKET_NETWORK = "Using network Socket"
# RCCL's ncclInit (src/init.cc), __FILE__ as AMD's packages build it, at its lines in RCCL 2.21.5.
RCCL_INIT_SOURCE = ("/long_pathname_so_that_rpms_can_package_the_debug_info/src/extlibs/rccl/build/hipify/"
                    "src/init.cc")
RCCL_NUMA_WARNING = (f"{RCCL_INIT_SOURCE}:142", "NUMA auto balancing enabled which can lead to variability in the "
                     'RCCL performance! Disable by "sudo sysctl kernel.numa_balancing=0"')
RCCL_IOMMU_WARNING = (f"{RCCL_INIT_SOURCE}:163", 'Missing "iommu=pt" from kernel command line which can lead to '
                      "system instablity or hang!")
NCCL_WARN_LINE = "{timestamp}{host}:{pid}:{pid} [0] {source} NCCL WARN {message}"
WARN_TIMESTAMPS_SINCE = (2, 26)  # NCCL 2.26 stamps WARN lines: NCCL_DEBUG_TIMESTAMP_LEVELS defaults to WARN

# The "bootstrap_unreachable" fault (the module docstring): the kernel's side, then NCCL's socket.cc at v2.28.7-1.
BOOTSTRAP_UNREACHABLE = "bootstrap_unreachable"
KERNEL_ROUTES = "proc/net/route"
KERNEL_ADDRESSES = "proc/net/fib_trie"
TCP_SYN_RETRIES = "proc/sys/net/ipv4/tcp_syn_retries"
LINUX_TCP_SYN_RETRIES = 6  # the kernel's default
TCP_TIMEOUT_INIT, TCP_RTO_MAX = 1, 120  # s: the first SYN retransmission timeout, doubled at each, and its cap
RTF_GATEWAY = 0x2
EPHEMERAL_PORTS = (32768, 60999)  # Linux's default net.ipv4.ip_local_port_range
SOCKET_RETRY_CNT = 34  # NCCL_SOCKET_RETRY_CNT
SOCKET_RETRY_SLEEP_MSEC = 100  # NCCL_SOCKET_RETRY_SLEEP_MSEC: the n-th retry sleeps n times this
CONNECT_TIMED_OUT = "Connection timed out"  # strerror(ETIMEDOUT)
POLL_CONNECT, START_CONNECT = "socketPollConnect", "socketStartConnect"  # the __func__ socketConnectCheck logs
# socketConnectCheck's INFO for a failed connect, by the release that brought it: 2.27 added the peer.
CONNECT_RETRY_MESSAGES = (
    ((2, 27), "{function}: connect to {peer} returned {error}, retrying ({attempt}/{count}) after sleep for "
              "{msec} msec"),
    ((2, 24), "{function}: connect returned {error}, retrying ({attempt}/{count}) after sleep for {msec} msec"),
)
# ncclFindInterfaces without NCCL_SOCKET_IFNAME: IB first, then anything but docker, lo and virbr, then those.
AUTOMATIC_INTERFACES = ("ib", "^docker,lo,virbr", "docker", "lo", "virbr")
BLOCKED_FOR_GOOD = 3600.0  # s: what a hung rank sleeps at a time once it has nothing left to print

EXIT_MISSING_LIBRARY = 127
EXIT_CUDA_ERROR = 2  # testCudaError
EXIT_NCCL_ERROR = 3  # testNcclError
EXIT_NOT_IMPLEMENTED = 5  # testNotImplemented
MISSING_LIBRARY = ("{program}: error while loading shared libraries: {library}: "
                   "cannot open shared object file: No such file or directory")


@dataclass(frozen=True)
class GpuView:
    device: int  # the CUDA/HIP device index
    pci: str  # "0000:18:00", as the device line prints it
    name: str
    links: int  # active NVLinks (xGMI links on AMD)
    link_speed: float  # GB/s per link


@dataclass(frozen=True)
class NicView:
    name: str
    state: str
    rate_gbps: int
    link_layer: str

    @property
    def usable(self) -> bool:
        return self.state == "Active" and self.link_layer in LINK_LAYERS


@dataclass(frozen=True)
class Failure:
    """What a rank prints when it cannot run, and the status it exits with."""

    stdout: tuple[str, ...]
    stderr: tuple[str, ...]
    status: int


@dataclass(frozen=True)
class RankView:
    """One rank's view of its own host: all that rank 0 needs of it to print the report."""

    hostname: str
    pid: int
    vendor: str  # "nvidia" or "amd"
    fabric: str  # "nvswitch", "nvlink-domain" or "xgmi"
    nvlink_domain: str | None  # the cluster_uuid of a GB300 tray
    library_version: str  # NCCL's or RCCL's
    tests_version: str
    gpus: tuple[GpuView, ...]
    nics: tuple[NicView, ...]
    gpudirect_rdma: bool
    nic_throughput_share: float
    library_log: tuple[str, ...]  # what NCCL_DEBUG made the library print
    last_error: str  # the library's last WARN, logged or not (ncclGetLastError)
    failure: Failure | None = None
    bootstrap_unreachable: bool = False  # the host's "bootstrap_unreachable" fault
    bootstrap_address: str | None = None  # the IPv4 address NCCL's bootstrap listens on (bootstrap_address())
    nic_loopback: bool = False  # NCCL_P2P_DISABLE and NCCL_SHM_DISABLE both set (nic_loopback())


@dataclass(frozen=True)
class BootstrapStall:
    """A bootstrap connection that never completes: the process that retries it, the thread, and the peer."""

    rank: int  # the MPI rank of the process
    thread: int  # the thread id NCCL's log prints
    device: int  # the CUDA/HIP device of that thread, as NCCL's log prints it
    function: str  # POLL_CONNECT or START_CONNECT
    peer: str  # as ncclSocketToString prints it: "10.213.7.11<43651>"


HALVES_HEADER = (f"# {'':>10}  {'':>12}  {'':>8}  {'':>6}  {'':>6}           out-of-place"
                 "                       in-place          ")


class NcclTests:
    """nccl-tests 2.17.6: its header, table and footer (src/util.cu), and how it fails (common.h)."""

    vendor = "nvidia"
    warmup_iters = 1
    header_before_failure = True  # the device report prints its header before it asks for the GPUs
    table_header = (
        "#",
        HALVES_HEADER,
        f"# {'size':>10}  {'count':>12}  {'type':>8}  {'redop':>6}  {'root':>6}  {'time':>7}  {'algbw':>6}  "
        f"{'busbw':>6}  {'#wrong':>6}  {'time':>7}  {'algbw':>6}  {'busbw':>6}  {'#wrong':>6} {'':>20}",
        f"# {'(B)':>10}  {'(elements)':>12}  {'':>8}  {'':>6}  {'':>6}  {'(us)':>7}  {'(GB/s)':>6}  "
        f"{'(GB/s)':>6}  {'':>6}  {'(us)':>7}  {'(GB/s)':>6}  {'(GB/s)':>6}  {'':>6} {'':>20}",
    )
    cuda_failure = "{host}: Test CUDA failure util.cu:553 '{error}'"
    test_failure = " .. {host} pid {pid}: Test failure common.cu:1100"
    cuda_errors = {DriverState.NO_KERNEL_MODULE: "no CUDA-capable device is detected",
                   DriverState.VERSION_MISMATCH: "system has unsupported display driver / cuda driver combination"}
    too_few_gpus = ("Invalid number of GPUs: {wanted} requested but only {found} were found.",
                    "Please check the number of processes and GPUs per process.")

    def library_version(self, host: SimHost) -> str | None:
        return nvidia_devices.nccl_library_version(host)

    def missing_library(self, program: str) -> str:
        return MISSING_LIBRARY.format(program=program, library="libnccl.so.2")

    def header(self, settings: dict, program: str, first: RankView) -> list[str]:
        return [f"# nccl-tests version {NCCL_TESTS_VERSION} nccl-headers={_version_code(NCCL_HEADERS_VERSION)} "
                f"nccl-library={_version_code(first.library_version)}",
                f"# Collective test starting: {program}", _nthread_line(settings), "#", "# Using devices"]

    def footer(self, settings: dict, program: str, average: float, last_error: str) -> list[str]:
        """writeErrors() ends the report with NCCL's last error, or an empty line."""
        return _footer(program, average) + [f"# error: {last_error}" if last_error else ""]

    def half(self, time_us: float, algbw: float, busbw: float, checked: bool) -> str:
        cells = f"  {_float_cell(time_us, 7):>7}  {_float_cell(algbw, 6):>6}  {_float_cell(busbw, 6):>6}"
        return cells + ("  {:6g}".format(0) if checked else "    N/A")

    def gpus(self, host: SimHost) -> tuple[list[GpuView], str | None]:
        """The GPUs the driver shows, or why CUDA cannot start."""
        state = nvidia_devices.driver_state(host)
        if state is not DriverState.READY:
            return [], self.cuda_errors[state]
        return [GpuView(gpu.index, f"{gpu.pci.domain:04x}:{gpu.pci.bus:02x}:{gpu.pci.device:02x}", gpu.name,
                        gpu.active_nvlinks, gpu.model["nvlink_speed_gbps"])
                for gpu in nvidia_devices.nvidia_gpus(host)], None

    def failure(self, hostname: str, pid: int, error: str | None, wanted: int, found: int,
                local_size: int) -> Failure | None:
        if error:
            return Failure((self.cuda_failure.format(host=hostname, error=error),
                            self.test_failure.format(host=hostname, pid=pid)), (), EXIT_CUDA_ERROR)
        if wanted > found:
            return Failure((self.test_failure.format(host=hostname, pid=pid),),
                           (self.too_few_gpus[0].format(wanted=wanted, found=found), self.too_few_gpus[1]),
                           EXIT_NOT_IMPLEMENTED)
        return None

    def gpudirect_rdma(self, host: SimHost) -> bool:
        return _read(host, PEERMEM_INITSTATE) == "live"

    def tests_version(self, host: SimHost) -> str:
        return NCCL_TESTS_VERSION

    def warnings(self, host: SimHost) -> list[tuple[str, str]]:
        return []  # NCCL's init warns of nothing the lab's hosts show

    def version_log(self, host: SimHost, hostname: str, pid: int, rank: int, level: int, library: str) -> list[str]:
        """NCCL's version line: rank 0's alone at VERSION and WARN, every rank's at INFO (init.cc showVersion)."""
        version = NCCL_VERSION_STRING.format(version=library, cuda=NCCL_CUDA_VERSION)
        if level >= DEBUG_LEVELS["INFO"]:
            return [NCCL_INFO_LINE.format(host=hostname, pid=pid, tid=pid, device=0, message=version)]
        return [version] if level and rank == 0 else []


class RcclTests:
    """rccl-tests as its src/common.cpp prints (the build of capture 07), over RCCL: the lab's ROCm 6.4 build."""

    vendor = "amd"
    warmup_iters = 5
    header_before_failure = False  # main() counts the GPUs before run() prints anything
    table_header = (
        "#",
        HALVES_HEADER,
        f"# {'size':>10}  {'count':>12}  {'type':>8}  {'redop':>6}  {'root':>6}  {'time':>7}  {'algbw':>6}  "
        f"{'busbw':>6} {'#wrong':>6}  {'time':>7}  {'algbw':>6}  {'busbw':>6} {'#wrong':>6} {'':>8}  {'':>8}  {'':>10}",
        f"# {'(B)':>10}  {'(elements)':>12}  {'':>8}  {'':>6}  {'':>6}  {'(us)':>7}  {'(GB/s)':>6}  "
        f"{'(GB/s)':>6}  {'':>5}  {'(us)':>7}  {'(GB/s)':>6}  {'(GB/s)':>6}  {'':>5} {'':>8}  {'':>8}  {'':>10}",
    )
    # CUDACHECK(cudaGetDeviceCount()) in main(), at its line of common.cpp (rccl-tests master-cpp, 84a4ab9)
    cuda_failure = "{host}: Test CUDA failure common.cpp:1147 '{error}'"
    no_device = "no ROCm-capable device is detected"  # hipErrorNoDevice: no amdgpu, no /dev/kfd
    too_few_gpus = ("[ERROR] The number of requested GPUs ({wanted}) is greater than the number of GPUs "
                    "available ({found})")
    too_few_gpus_on_node = too_few_gpus + " on node ({host})"

    def library_version(self, host: SimHost) -> str | None:
        return host.package_version(RCCL_VERSION_MARKER) if host.path(RCCL_LIBRARY).exists() else None

    def missing_library(self, program: str) -> str:
        return MISSING_LIBRARY.format(program=program, library="librccl.so.1")

    def header(self, settings: dict, program: str, first: RankView) -> list[str]:
        return [f"# Collective test starting: {program}", _nthread_line(settings), "#",
                f"rccl-tests: Version {first.tests_version}", "# Using devices"]

    def footer(self, settings: dict, program: str, average: float, last_error: str) -> list[str]:
        """The asterisks line when validating; the last line is RCCL's last error, printed as it is."""
        checked = ["# Errors with asterisks indicate errors that have exceeded the maximum threshold."]
        return (checked if settings["check"] else []) + _footer(program, average) + [last_error]

    def half(self, time_us: float, algbw: float, busbw: float, checked: bool) -> str:
        if time_us >= 10000.0:
            time = f"{time_us:7.0f}"
        elif time_us >= 100.0:
            time = f"{time_us:7.1f}"
        else:
            time = f"{time_us:7.2f}"
        return f"  {time:>7}  {algbw:6.2f}  {busbw:6.2f}  " + ("{:5g}".format(0) if checked else f"{'N/A':>5}")

    def gpus(self, host: SimHost) -> tuple[list[GpuView], str | None]:
        if not amdgpu.driver_loaded(host):
            return [], self.no_device
        model = host.hardware()["gpu_model"]
        return [GpuView(gpu.index, gpu.bus_id[:10].lower(), gpu.name, model["nvlink_count"],
                        model["nvlink_speed_gbps"]) for gpu in amdgpu.amd_gpus(host)], None

    def failure(self, hostname: str, pid: int, error: str | None, wanted: int, found: int,
                local_size: int) -> Failure | None:
        if error:
            return Failure((self.cuda_failure.format(host=hostname, error=error),), (), EXIT_CUDA_ERROR)
        if local_size == 1 and wanted > found:  # without MPI: nGpus > numDevices
            return Failure((), (self.too_few_gpus.format(wanted=wanted, found=found),), EXIT_NCCL_ERROR)
        if local_size > 1 and wanted * local_size > found:  # under MPI: nGpus x processes on the node
            return Failure((), (self.too_few_gpus_on_node.format(wanted=wanted * local_size, found=found,
                                                                 host=hostname),), EXIT_NCCL_ERROR)
        return None

    def gpudirect_rdma(self, host: SimHost) -> bool:
        return True  # ROCm's peer memory client is part of amdgpu

    def tests_version(self, host: SimHost) -> str:
        """rcclTestsGitHash, "<branch>:<commit>", of the build the package records."""
        build = host.package_version(RCCL_TESTS_VERSION_MARKER)
        return f"{build}:{_stand_in_commit('rccl-tests ' + build)}" if build else "Unknown"

    def warnings(self, host: SimHost) -> list[tuple[str, str]]:
        """What RCCL's ncclInit warns of on every rank, whatever NCCL_DEBUG says: (file:line, message)."""
        warnings = []
        if _read(host, NUMA_BALANCING) == "1":
            warnings.append(RCCL_NUMA_WARNING)
        if "iommu=pt" not in (_read(host, KERNEL_COMMAND_LINE) or ""):
            warnings.append(RCCL_IOMMU_WARNING)
        return warnings

    def version_log(self, host: SimHost, hostname: str, pid: int, rank: int, level: int, library: str) -> list[str]:
        """RCCL's showVersion: rank 0 prints its version block from NCCL_DEBUG=VERSION on (src/init.cc)."""
        if rank or level < DEBUG_LEVELS["VERSION"]:
            return []
        release, _, build = (host.rocm_version() or "").partition("-")
        major_minor = ".".join(release.split(".")[:2])
        return [f"RCCL version : {library}-{_stand_in_commit('rccl ' + library)}",
                f"HIP version  : {major_minor}.{build}-{_stand_in_commit('hip ' + release)}",
                f"ROCm version : {release}.0-{build}-{_stand_in_commit('hip ' + release)}",
                f"Hostname     : {hostname}", f"Librccl path : /{RCCL_LIBRARY}"]


class MergedRcclTests(RcclTests):
    """rccl-tests merged with nccl-tests 2.17 (`# rccl-tests version 2.17.9-<branch>:<commit>`): nccl-tests'
    header, table and footer under rccl-tests' name, over RCCL. The lab's ROCm 7 build."""

    warmup_iters = NcclTests.warmup_iters
    table_header = NcclTests.table_header
    half = NcclTests.half
    footer = NcclTests.footer

    def header(self, settings: dict, program: str, first: RankView) -> list[str]:
        code = _version_code(first.library_version)  # built against the RCCL of its own release
        return [f"# rccl-tests version {first.tests_version} rccl-headers={code} rccl-library={code}",
                f"# Collective test starting: {program}", _nthread_line(settings), "#", "# Using devices"]


Suite = NcclTests | RcclTests | MergedRcclTests


def suite_for(vendor: str, host: SimHost) -> Suite:
    """The tests the host has: nccl-tests, or the rccl-tests build of its ROCm release (by the version it prints)."""
    if vendor == "nvidia":
        return NcclTests()
    merged = (host.package_version(RCCL_TESTS_VERSION_MARKER) or "")[:1].isdigit()
    return MergedRcclTests() if merged else RcclTests()


def nccl_all_reduce_main(argv: list[str], host: SimHost | None = None) -> int:
    return main("all_reduce", "nvidia", argv, host)


def nccl_alltoall_main(argv: list[str], host: SimHost | None = None) -> int:
    return main("alltoall", "nvidia", argv, host)


def rccl_all_reduce_main(argv: list[str], host: SimHost | None = None) -> int:
    return main("all_reduce", "amd", argv, host)


def rccl_alltoall_main(argv: list[str], host: SimHost | None = None) -> int:
    return main("alltoall", "amd", argv, host)


def main(collective: str, vendor: str, argv: list[str], host: SimHost | None = None,
         environ: Mapping[str, str] | None = None, sleep: Callable[[float], None] = time.sleep) -> int:
    host = host or SimHost()
    environ = os.environ if environ is None else environ
    suite, program = suite_for(vendor, host), f"{collective}_perf"
    if suite.library_version(host) is None:
        print(suite.missing_library(program), file=sys.stderr)
        return EXIT_MISSING_LIBRARY
    try:
        settings = parse(argv, suite)
    except ValueError as error:
        print(error, file=sys.stderr)
        return 1
    if int(environ.get("OMPI_COMM_WORLD_SIZE", "1")) > 1:
        return _run_under_mpi(collective, suite, settings, host, environ, sleep)
    view = rank_view(host, suite, settings, environ)
    _print_errors(view)
    text, status = report([view], settings, collective, suite)
    print(text, end="")
    return status


def _run_under_mpi(collective: str, suite: Suite, settings: dict, host: SimHost, environ: Mapping[str, str],
                   sleep: Callable[[float], None] = time.sleep) -> int:
    """One rank of an mpirun job: gather every rank's view to rank 0, which prints; all exit alike, or all hang
    in NCCL's init when a host's bootstrap cannot be reached (bootstrap_hang)."""
    from mpi4py import MPI  # initialises MPI from mpirun's environment; only the simulator needs it

    world = MPI.COMM_WORLD
    rank, hostname = world.Get_rank(), _hostname(host)
    hostnames = world.allgather(hostname)  # as nccl-tests gathers host hashes to number the ranks of each host
    view = rank_view(host, suite, settings, environ, rank=rank,
                     local_rank=hostnames[:rank].count(hostname), local_size=hostnames.count(hostname))
    _print_errors(view)
    views = world.gather(view, root=0)
    outcome = None
    if rank == 0:
        stalls = None if any(view.failure for view in views) else bootstrap_hang(views)
        if stalls is None:
            text, status = report(views, settings, collective, suite)
        else:  # nccl-tests got as far as ncclCommInitRank
            text, status = _text(_until_init(views, settings, collective, suite)), None
        print(text, end="", flush=True)
        outcome = (status, stalls)
    status, stalls = world.bcast(outcome, root=0)
    if stalls is not None:
        _hang_in_bootstrap([stall for stall in stalls if stall.rank == rank], view, _debug_level(environ),
                           connect_timeout(host), sleep)
    return status


def bootstrap_hang(views: list[RankView]) -> list[BootstrapStall] | None:
    """The connections NCCL's bootstrap retries for good, or None when it gets through: when no host has the
    "bootstrap_unreachable" fault, or all the ranks are on one host (the module docstring)."""
    unreachable = {view.hostname for view in views if view.bootstrap_unreachable}
    if not unreachable or len({view.hostname for view in views}) == 1:
        return None
    root = views[0]
    if root.hostname in unreachable:  # every rank of the other hosts, sending its address to the root
        return [BootstrapStall(rank, _init_thread(view, place), gpu.device, POLL_CONNECT, _peer(root, "root"))
                for rank, view in enumerate(views) if view.hostname != root.hostname
                for place, gpu in enumerate(view.gpus)]
    target = next(view for view in views if view.hostname in unreachable)
    # the root's own thread, born without a current device: [0]
    return [BootstrapStall(0, root.pid + 1, 0, START_CONNECT, _peer(target, f"listen {target.gpus[0].device}"))]


def bootstrap_retry_line(library: str, hostname: str, pid: int, thread: int, device: int, function: str,
                         peer: str, attempt: int) -> str | None:
    """The INFO line `library` logs after the `attempt`-th connect to `peer` timed out, or None when that
    library retries without a line (NCCL before 2.24)."""
    for since, template in CONNECT_RETRY_MESSAGES:
        if _at_least(library, since):
            message = template.format(function=function, peer=peer, error=CONNECT_TIMED_OUT, attempt=attempt,
                                      count=SOCKET_RETRY_CNT, msec=attempt * SOCKET_RETRY_SLEEP_MSEC)
            return NCCL_INFO_LINE.format(host=hostname, pid=pid, tid=thread, device=device, message=message)
    return None


def bootstrap_retry_delays(timeout: float) -> list[float]:
    """Seconds before each retry line: the connect's own timeout, after the sleep that followed the last one."""
    return [timeout + (attempt - 1) * SOCKET_RETRY_SLEEP_MSEC / 1000 for attempt in range(1, SOCKET_RETRY_CNT + 1)]


def connect_timeout(host: SimHost) -> float:
    """How long the host's kernel tries a connect whose SYNs get no answer before ETIMEDOUT: 127 s by default."""
    try:
        retries = int(_read(host, TCP_SYN_RETRIES) or LINUX_TCP_SYN_RETRIES)
    except ValueError:
        retries = LINUX_TCP_SYN_RETRIES
    return float(sum(min(TCP_TIMEOUT_INIT << attempt, TCP_RTO_MAX) for attempt in range(retries + 1)))


def bootstrap_address(host: SimHost, environ: Mapping[str, str]) -> str | None:
    """The IPv4 address of the interface NCCL's bootstrap would take on the host (ncclFindInterfaces), from the
    kernel's tables: each interface's networks in /proc/net/route, the host's own addresses (LOCAL) in
    /proc/net/fib_trie. None when they show none."""
    interfaces = _interface_addresses(host)
    chosen = environ.get("NCCL_SOCKET_IFNAME", "")
    for selection in (chosen,) if len(chosen) > 1 else AUTOMATIC_INTERFACES:
        for name, address in interfaces:
            if _interface_matches(name, selection):
                return address
    return None


def _interface_addresses(host: SimHost) -> list[tuple[str, str]]:
    """(interface, address) in the kernel's order: the host's own addresses, each on the interface whose
    directly connected network holds it."""
    networks = []
    for line in (_read(host, KERNEL_ROUTES) or "").splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 8 and not int(fields[3], 16) & RTF_GATEWAY and int(fields[7], 16):
            networks.append((fields[0], _kernel_ipv4(fields[1]), _kernel_ipv4(fields[7])))
    local, last = [], None
    for line in (_read(host, KERNEL_ADDRESSES) or "").splitlines():
        text = line.strip()
        if text.startswith("|-- "):
            last = text[4:]
        elif text == "/32 host LOCAL" and last and last not in local:
            local.append(last)
    found = []
    for name, network, mask in networks:
        for address in local:
            if _ipv4(address) & mask == network & mask and (name, address) not in found:
                found.append((name, address))
    return found


def _interface_matches(name: str, selection: str) -> bool:
    """NCCL's matchIfList: a comma-separated list of prefixes ("=" for exact names), "^" to take the others."""
    invert = selection.startswith("^")
    selection = selection.lstrip("^")
    exact = selection.startswith("=")
    prefixes = [entry.split(":")[0] for entry in selection.lstrip("=").split(",") if entry]
    hit = any(name == prefix if exact else name.startswith(prefix) for prefix in prefixes)
    return hit != invert


def _kernel_ipv4(hexadecimal: str) -> int:
    """An address of /proc/net/route (the kernel's in-memory order, hexadecimal) as a number."""
    return _ipv4(socket.inet_ntoa(struct.pack("=I", int(hexadecimal, 16))))


def _ipv4(address: str) -> int:
    return struct.unpack("!I", socket.inet_aton(address))[0]


def _init_thread(view: RankView, place: int) -> int:
    """The thread that runs the init of the view's `place`-th GPU: the main one when it drives one GPU."""
    return view.pid if len(view.gpus) == 1 else view.pid + 2 + place


def _peer(view: RankView, socket_name: str) -> str:
    """A listening socket of the view's process as ncclSocketToString prints it: "address<port>"."""
    low, high = EPHEMERAL_PORTS
    digest = hashlib.sha256(f"{view.hostname} {view.pid} {socket_name}".encode()).digest()
    port = low + int.from_bytes(digest[:4], "big") % (high - low + 1)
    return f"{view.bootstrap_address or view.hostname}<{port}>"


def _hang_in_bootstrap(stalls: list[BootstrapStall], view: RankView, level: int, timeout: float,
                       sleep: Callable[[float], None]) -> NoReturn:
    """This rank's ncclCommInitRank, which never returns: its retry lines at INFO, as each connect times out,
    until NCCL's retries are spent; then it blocks until killed."""
    if level >= DEBUG_LEVELS["INFO"] and stalls:
        for attempt, delay in enumerate(bootstrap_retry_delays(timeout), start=1):
            lines = [bootstrap_retry_line(view.library_version, view.hostname, view.pid, stall.thread,
                                          stall.device, stall.function, stall.peer, attempt) for stall in stalls]
            if None in lines:
                break  # this library logs none
            sleep(delay)
            print("\n".join(lines), flush=True)
    while True:
        sleep(BLOCKED_FOR_GOOD)


def rank_view(host: SimHost, suite: Suite, settings: dict, environ: Mapping[str, str], rank: int = 0,
              local_rank: int = 0, local_size: int = 1, pid: int | None = None) -> RankView:
    """What one rank sees of its own host and the GPUs it drives."""
    hardware = host.hardware()
    hostname, pid = _hostname(host), os.getpid() if pid is None else pid
    per_process = settings["nthreads"] * settings["ngpus"]
    gpus, error = suite.gpus(host)
    first = local_rank * per_process
    failure = suite.failure(hostname, pid, error, first + per_process, len(gpus), local_size)
    nics = tuple(NicView(port.name, port.state, port.rate, port.link_layer) for port in infiniband.hca_ports(host))
    library = suite.library_version(host)
    level = _debug_level(environ)
    warnings = suite.warnings(host)
    log = _warn_lines(warnings, hostname, pid, library) if level >= DEBUG_LEVELS["WARN"] else []
    log += suite.version_log(host, hostname, pid, rank, level, library)
    if level >= DEBUG_LEVELS["INFO"] and not any(nic.usable for nic in nics):
        log += [NCCL_INFO_LINE.format(host=hostname, pid=pid, tid=pid, device=0, message=message)
                for message in (NO_IB_DEVICE, SOCKET_NETWORK)]
    return RankView(
        hostname=hostname, pid=pid, vendor=suite.vendor, fabric=hardware["fabric"],
        nvlink_domain=hardware.get("cluster_uuid"), library_version=library, tests_version=suite.tests_version(host),
        gpus=tuple(gpus[first:first + per_process]) if failure is None else (), nics=nics,
        gpudirect_rdma=suite.gpudirect_rdma(host),
        nic_throughput_share=float(hardware.get("faults", {}).get("nic_throughput_share", 1.0)),
        library_log=tuple(log), last_error=warnings[-1][1] if warnings else "", failure=failure,
        bootstrap_unreachable=bool(hardware.get("faults", {}).get(BOOTSTRAP_UNREACHABLE)),
        bootstrap_address=bootstrap_address(host, environ),
        nic_loopback=nic_loopback(environ),
    )


def nic_loopback(environ: Mapping[str, str]) -> bool:
    """Whether the environment disables both of NCCL's on-host transports, P2P and SHM: each variable read as
    NCCL_PARAM reads it, an integer, non-zero to disable (anything else leaves the default, enabled)."""
    def disabled(name: str) -> bool:
        try:
            return int(environ.get(name, "0").strip(), 0) != 0
        except ValueError:
            return False
    return all(disabled(name) for name in NIC_LOOPBACK_SWITCHES)


def report(views: list[RankView], settings: dict, collective: str, suite: Suite) -> tuple[str, int]:
    """Rank 0's report of a run over `views` (in rank order) and the status every rank exits with."""
    program = f"{collective}_perf"
    header = suite.header(settings, program, views[0])
    failures = [view.failure for view in views if view.failure]
    if failures:
        lines = (header if suite.header_before_failure else []) + [line for failure in failures
                                                                   for line in failure.stdout]
        return _text(lines), failures[0].status
    lines = _until_init(views, settings, collective, suite) + list(suite.table_header)
    ranks = sum(len(view.gpus) for view in views)
    peak, latency = peak_bus_bandwidth(views, collective), latency_us(views)
    type_size = DATATYPES[settings["datatype"]]
    bus_bandwidths = []
    for size in _sizes(settings):
        count, size_bytes = _counts(collective, size, type_size, ranks)
        row = f"{size_bytes:12d}  {count:12d}  {settings['datatype']:>8}  {COLLECTIVES[collective]:>6}  {-1:6d}"
        for in_place, time_share in ((False, 1.0), (True, IN_PLACE_TIME_SHARE)):
            time_us = (latency + size_bytes * (_bus_factor(collective, ranks) or 1.0) / (peak * 1e3)) * time_share
            algbw = size_bytes / (time_us * 1e3)
            busbw = algbw * _bus_factor(collective, ranks)
            bus_bandwidths.append(busbw)
            row += suite.half(time_us, algbw, busbw, checked=settings["check"] > 0 and not (
                in_place and collective == "alltoall"))  # alltoall is not checked in place
        lines.append(row)
    average = sum(bus_bandwidths) / len(bus_bandwidths) if bus_bandwidths else 0.0
    lines += suite.footer(settings, program, average, views[0].last_error)
    return _text(lines), 0


def _until_init(views: list[RankView], settings: dict, collective: str, suite: Suite) -> list[str]:
    """What rank 0 prints until NCCL's init returns: the header, the devices, then the library's own lines."""
    return (suite.header(settings, f"{collective}_perf", views[0]) + _device_lines(views)
            + [line for view in views for line in view.library_log])


def peak_bus_bandwidth(views: list[RankView], collective: str) -> float:
    """The bus bandwidth (GB/s) large messages reach over these ranks' hosts (the module docstring's model)."""
    if _through_own_nics(views):  # NIC loopback: no GPU link carries the ring
        return _per_nic(views[0])
    gpu_links = min(_gpu_links(view, collective) for view in views)
    if _over_nvlink(views):
        return gpu_links
    return min(gpu_links, min(_network(view, collective) for view in views))


def latency_us(views: list[RankView]) -> float:
    on_host = max(LATENCY_US[view.fabric] for view in views)
    if _over_nvlink(views) and not _through_own_nics(views):
        return on_host
    transport = "ib" if all(any(nic.usable for nic in view.nics) for view in views) else "socket"
    return on_host + NETWORK_LATENCY_US[transport]


def _through_own_nics(views: list[RankView]) -> bool:
    """NIC loopback (the module docstring): one host, with P2P and SHM both disabled."""
    return len(views) == 1 and views[0].nic_loopback


def _over_nvlink(views: list[RankView]) -> bool:
    """One host, or trays of one NVLink domain: no byte crosses a NIC."""
    domains = {view.nvlink_domain for view in views}
    return len(views) == 1 or (all(view.fabric == "nvlink-domain" for view in views) and len(domains) == 1
                               and None not in domains)


def _gpu_links(view: RankView, collective: str) -> float:
    gpu = min(view.gpus, key=lambda gpu: gpu.links)
    figure = gpu.links * gpu.link_speed * (XGMI_CALIBRATION if view.vendor == "amd" else 1.0)
    figure = max(figure, PCIE_BUS_BANDWIDTH)
    return figure * ALLTOALL_SHARE[view.vendor] if collective == "alltoall" else figure


def _network(view: RankView, collective: str) -> float:
    ports = [nic for nic in view.nics if nic.usable]
    if not ports:
        return SOCKET_BUS_BANDWIDTH
    if collective == "alltoall":
        return _per_nic(view)
    return _per_port(view, ports) * min(len(ports), len(view.gpus))


def _per_port(view: RankView, ports: list[NicView]) -> float:
    per_port = min(nic.rate_gbps for nic in ports) / 8 * NIC_EFFICIENCY * view.nic_throughput_share
    return per_port * (1.0 if view.gpudirect_rdma else WITHOUT_GPUDIRECT_RDMA)


def _per_nic(view: RankView) -> float:
    """One NIC's figure for one GPU: halved when a port down makes two GPUs share a NIC; sockets with none."""
    ports = [nic for nic in view.nics if nic.usable]
    if not ports:
        return SOCKET_BUS_BANDWIDTH
    return _per_port(view, ports) / math.ceil(len(view.gpus) / len(ports))


def parse(argv: list[str], suite: Suite) -> dict:
    settings = DEFAULTS | {"warmup_iters": suite.warmup_iters}
    arguments = list(argv)
    while arguments:
        argument = arguments.pop(0)
        name, has_value, value = argument.lstrip("-").partition("=")
        key = OPTIONS.get(name, name)
        if key not in settings:
            raise ValueError(f"{argument}: option not simulated by the k3ops lab")
        if not has_value:
            value = arguments.pop(0)
        if key == "datatype":
            if value not in DATATYPES:
                raise ValueError(f"-d {value}: datatype not simulated by the k3ops lab (one of {', '.join(DATATYPES)})")
            settings[key] = value
        else:
            settings[key] = _size(value) if key in SIZE_OPTIONS else int(value, 0)
    return settings


def _footer(program: str, average: float) -> list[str]:
    return ["# Out of bounds values : 0 OK", f"# Avg bus bandwidth    : {average:g} ", "#",
            f"# Collective test concluded: {program}"]


def _debug_level(environ: Mapping[str, str]) -> int:
    return DEBUG_LEVELS.get(environ.get("NCCL_DEBUG", "").upper(), 0)


def _print_errors(view: RankView) -> None:
    """A rank's own errors go to its stderr, straight from its host (mpirun forwards them)."""
    if view.failure and view.failure.stderr:
        print("\n".join(view.failure.stderr), file=sys.stderr, flush=True)


def _warn_lines(warnings: list[tuple[str, str]], hostname: str, pid: int, library: str) -> list[str]:
    """Each warning as NCCL's logger prints it: after an empty line, time-stamped from NCCL 2.26 on."""
    timestamp = f"[{nvidia_devices.now():%Y-%m-%d %H:%M:%S}] " if _at_least(library, WARN_TIMESTAMPS_SINCE) else ""
    return [text for source, message in warnings for text in (
        "", NCCL_WARN_LINE.format(timestamp=timestamp, host=hostname, pid=pid, source=source, message=message))]


def _stand_in_commit(seed: str) -> str:
    """A short commit id for a simulated build's version strings: stable, and as long as git's."""
    return hashlib.sha256(seed.encode()).hexdigest()[:7]


def _text(lines: list[str]) -> str:
    return "".join(line + "\n" for line in lines)


def _nthread_line(settings: dict) -> str:
    step = f"{settings['stepfactor']}(factor)" if settings["stepfactor"] > 1 else f"{settings['stepbytes']}(bytes)"
    return (f"# nThread {settings['nthreads']} nGpus {settings['ngpus']} minBytes {settings['minbytes']} "
            f"maxBytes {settings['maxbytes']} step: {step} warmup iters: {settings['warmup_iters']} "
            f"iters: {settings['iters']} agg iters: {settings['agg_iters']} validation: {settings['check']} graph: 0")


def _device_lines(views: list[RankView]) -> list[str]:
    lines, rank = [], 0
    for view in views:
        for gpu in view.gpus:
            lines.append(f"#  Rank {rank:2d} Group  0 Pid {view.pid:6d} on {view.hostname:>10} device {gpu.device:2d} "
                         f"[{gpu.pci}] {gpu.name}")
            rank += 1
    return lines


def _counts(collective: str, size: int, type_size: int, ranks: int) -> tuple[int, int]:
    """(count column, size column) as the tests' getCollByteCount make them of a size."""
    count = size // type_size
    if collective == "alltoall":  # per-peer count, rounded down to 16 bytes; the size is what each rank sends
        per_peer = (count // ranks) & -(16 // type_size)
        return per_peer, per_peer * ranks * type_size
    return count, count * type_size


def _bus_factor(collective: str, ranks: int) -> float:
    """busbw = algbw x 2(n-1)/n for all_reduce, x (n-1)/n for alltoall (doc/PERFORMANCE.md)."""
    return (2 if collective == "all_reduce" else 1) * (ranks - 1) / ranks


def _hostname(host: SimHost) -> str:
    return host.hardware()["hostname"].split(".")[0]


def _read(host: SimHost, relative: str) -> str | None:
    try:
        return host.path(relative).read_text().strip()
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return None


def _at_least(version: str, minimum: tuple[int, int]) -> bool:
    return tuple(int(part) for part in version.split(".")[:2]) >= minimum


def _size(text: str) -> int:
    """The tests' parsesize: a number with an optional K, M or G (powers of 1024)."""
    multiplier = SIZE_SUFFIXES.get(text[-1].upper())
    return int(float(text[:-1]) * multiplier) if multiplier else int(float(text))


def _version_code(version: str) -> int:
    major, minor, patch = (int(part) for part in version.split("."))
    return major * 10000 + minor * 100 + patch


def _sizes(settings: dict) -> list[int]:
    sizes, size = [], settings["minbytes"]
    while size <= settings["maxbytes"]:
        sizes.append(size)
        size = size * settings["stepfactor"] if settings["stepfactor"] > 1 else size + settings["stepbytes"]
    return sizes


def _float_cell(value: float, width: int) -> str:
    """nccl-tests' getFloatStr: as many decimals as fit the column, then exponent form."""
    power, bound = 0, 1
    while value >= bound:
        power, bound = power + 1, bound * 10
    if power < width - 2:
        return f"{value:{width}.2f}"
    if power < width - 1:
        return f"{value:{width}.1f}"
    if power < width + 1:
        return f"{value:{width}.0f}"
    return f"{value:{width}.1e}" if width >= 7 else f"{value:{width}.0e}"
