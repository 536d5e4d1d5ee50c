#!/usr/bin/env python3
"""A sampling profiler for one thread, kernel and user space, for hosts without `perf`.

Usage:
  scripts/profile.py record TID SECONDS OUT [--period-us N] [--port P]
  scripts/profile.py report OUT [--requests N] [--top N]

`record` asks the kernel (perf_event_open, the system call `perf` itself uses) to sample thread
TID on its own CPU clock: one sample every N µs the thread runs (default 50), with the
instruction pointer and, when the sample falls in the kernel, the kernel call chain. It writes
OUT.samples (one line per sample: the pointer, then the chain), OUT.maps (the thread's
executable mappings, to place user addresses in their files) and OUT.info (the CPU time
sampled, in ns; with --port, also the requests the server on 127.0.0.1:P served while sampled,
from INFO's total_commands_processed read just before and just after). It needs root, or
`kernel.perf_event_paranoid` at most 1 and room for the 64 MB ring in the locked-memory
limits (`perf_event_mlock_kb`, `ulimit -l`).

`report` names each sample's function: kernel addresses by /proc/kallsyms (read as root, or the
names are hidden), user addresses by `addr2line -f -i` on the file mapped there (innermost
inlined function, and the function it was inlined into). With the requests served while
sampled (recorded with --port, or given with --requests) every share is also given in ns per
request: the CPU time sampled × the share ÷ the requests.

What a sample means: the thread was on a CPU, at that instruction, when the clock fired. An
instruction that waits (a load that misses, a page walk) collects the samples of its wait, on
itself or on the instruction after it. Where the kernel runs with interrupts off, the clock's
samples wait and land where interrupts come back on (`_raw_spin_unlock_irqrestore` and the
like): read those with the call chains. Sampling costs the thread some time of its own: at the
default period it ran 5–15% slower in the measurements of docs/performance.md, so compare
shares and ns between runs sampled alike, and take server CPU per request from /proc (as the
benchmark scripts do), not from here.
"""

import bisect
import collections
import ctypes
import mmap
import os
import re
import struct
import subprocess
import sys
import time

PERF_TYPE_SOFTWARE = 1
PERF_COUNT_SW_CPU_CLOCK = 0
SAMPLE_IP, SAMPLE_TID, SAMPLE_CALLCHAIN = 1, 2, 32
PERF_RECORD_LOST, PERF_RECORD_SAMPLE = 2, 9
IOC_ENABLE, IOC_DISABLE = 0x2400, 0x2401
NR_PERF_EVENT_OPEN = {"x86_64": 298, "aarch64": 241}
# Data pages of the sample ring (a power of two): 64 MB, about 240,000 samples with chains.
RING_PAGES = 1 << 14
KERNEL_START = 0xFFFF800000000000
# Call chains carry context markers (PERF_CONTEXT_KERNEL and the like) at the top of the range.
CONTEXT_MARKERS = 0xFFFFFFFFFFFFF000


def served(port):
    """INFO's total_commands_processed of the server on 127.0.0.1:port."""
    text = subprocess.run(["redis-cli", "-p", str(port), "INFO", "stats"],
                          capture_output=True, text=True, check=True).stdout
    for line in text.splitlines():
        if line.startswith("total_commands_processed:"):
            return int(line.split(":")[1])
    sys.exit(f"no total_commands_processed from port {port}")


def record(tid, seconds, out, period_us, port):
    libc = ctypes.CDLL(None, use_errno=True)
    # struct perf_event_attr, 128 bytes (PERF_ATTR_SIZE_VER7): type, size, config,
    # sample_period, sample_type, read_format, then the flag bits.
    attr = bytearray(128)
    struct.pack_into("IIQQQQ", attr, 0, PERF_TYPE_SOFTWARE, len(attr), PERF_COUNT_SW_CPU_CLOCK,
                     period_us * 1000, SAMPLE_IP | SAMPLE_TID | SAMPLE_CALLCHAIN, 0)
    disabled, exclude_callchain_user = 1 << 0, 1 << 22
    struct.pack_into("Q", attr, 40, disabled | exclude_callchain_user)
    struct.pack_into("H", attr, 108, 32)  # sample_max_stack
    nr = NR_PERF_EVENT_OPEN[os.uname().machine]
    fd = libc.syscall(nr, ctypes.create_string_buffer(bytes(attr)), tid, -1, -1, 0)
    if fd < 0:
        sys.exit(f"perf_event_open: {os.strerror(ctypes.get_errno())}")
    page = mmap.PAGESIZE
    ring = mmap.mmap(fd, (RING_PAGES + 1) * page, mmap.MAP_SHARED,
                     mmap.PROT_READ | mmap.PROT_WRITE)
    with open(out + ".maps", "w") as maps:
        for line in open(f"/proc/{tid}/maps"):
            if " r-xp " in line and "/" in line:
                maps.write(line)
    before = served(port) if port else None
    libc.ioctl(fd, IOC_ENABLE, 0)
    time.sleep(seconds)
    libc.ioctl(fd, IOC_DISABLE, 0)
    # The INFO call itself is one command more.
    requests = served(port) - before - 1 if port else None
    (cpu_ns,) = struct.unpack("Q", os.read(fd, 8))
    (head,) = struct.unpack_from("Q", ring, 1024)  # perf_event_mmap_page.data_head
    data = ring[page:page + head]
    samples = lost = 0
    with open(out + ".samples", "w") as f:
        at = 0
        while at < len(data):
            kind, _, length = struct.unpack_from("IHH", data, at)
            if length == 0:
                break
            if kind == PERF_RECORD_SAMPLE:
                ip, _pid, _tid, n = struct.unpack_from("QIIQ", data, at + 8)
                chain = struct.unpack_from(f"{n}Q", data, at + 32)
                f.write(" ".join(f"{x:x}" for x in (ip,) + chain) + "\n")
                samples += 1
            elif kind == PERF_RECORD_LOST:
                lost += struct.unpack_from("Q", data, at + 16)[0]
            at += length
    # The ring is never read while it fills (its tail stays at 0), so once full the kernel
    # writes nothing more, not even a record of what it lost: compare with the clock instead.
    expected = cpu_ns // (period_us * 1000)
    if samples + lost < 0.9 * expected:
        sys.exit(f"{samples} samples where {expected} were due: the sample ring filled; "
                 "sample for less time or less often")
    with open(out + ".info", "w") as f:
        f.write(f"cpu_ns {cpu_ns}\nsamples {samples}\nlost {lost}\n")
        if requests is not None:
            f.write(f"requests {requests}\n")
    print(f"{samples} samples over {cpu_ns / 1e9:.2f} s of CPU, {lost} lost -> {out}.samples")


class Kernel:
    def __init__(self):
        syms = []
        for line in open("/proc/kallsyms"):
            addr, kind, name = line.split()[:3]
            if kind in "tTwW" and int(addr, 16):
                syms.append((int(addr, 16), name))
        syms.sort()
        self.addrs = [a for a, _ in syms]
        self.names = [n for _, n in syms]

    def name(self, ip):
        i = bisect.bisect_right(self.addrs, ip) - 1
        return self.names[i] if i >= 0 else "?"


def user_names(maps, ips):
    """{ip: (innermost function, outer function)} for the user addresses, by addr2line."""
    regions = []
    for line in open(maps):
        f = line.split()
        lo, hi = (int(x, 16) for x in f[0].split("-"))
        regions.append((lo, hi, int(f[2], 16), f[5]))
    by_file = collections.defaultdict(dict)
    for ip in ips:
        for lo, hi, offset, path in regions:
            if lo <= ip < hi:
                by_file[path][ip] = ip - lo + offset
                break
    names = {}
    for path, places in by_file.items():
        base = load_bias(path)
        order = list(places)
        query = [f"{places[ip] + base:x}" for ip in order]
        lines = subprocess.run(["addr2line", "-f", "-i", "-C", "-a", "-e", path] + query,
                               capture_output=True, text=True).stdout.splitlines()
        chains, chain, expect_name = [], None, False
        for line in lines:
            if line.startswith("0x"):
                chain = []
                chains.append(chain)
                expect_name = True
            elif expect_name:
                chain.append(short(line))
                expect_name = False
            else:
                expect_name = True
        tag = os.path.basename(path)
        for ip, chain in zip(order, chains):
            if not chain or chain[0] == "??":
                chain = [f"[{tag}]"]
            names[ip] = (chain[0], chain[-1])
    return names


def load_bias(path):
    """What to add to a file offset in an executable segment to get its address in the ELF."""
    out = subprocess.run(["readelf", "-lW", path], capture_output=True, text=True).stdout
    for line in out.splitlines():
        f = line.split()
        if f and f[0] == "LOAD" and "E" in "".join(f[6:-1]):
            return int(f[2], 16) - int(f[1], 16)
    return 0


def short(name):
    """A function name without its generic arguments (`Vec<T>` is `Vec`); a trait's method
    keeps its type and trait (`<Vec as Iterator>::next`)."""
    prev = None
    while prev != name:
        prev, name = name, re.sub(r"(?<=\w)<[^<>]*>", "", name)
    return name


# Kernel functions by subsystem, the first pattern that matches: the rows of the kernel table.
GROUPS = [
    ("io_uring", r"(__)?io_(?!schedule)|tctx_"),
    ("epoll, eventfd, poll", r"(__)?ep_|do_epoll|eventfd|(__)?wake_up|sock_poll|tcp_poll"),
    ("scheduler, timers, wake-ups", r"(__)?schedule|pick_|put_prev|enqueue|dequeue|finish_task"
     r"|(__)?switch_to|try_to_wake|ttwu|select_task|(__)?hrtimer|update_|sched_|psi_"),
    ("TCP/IP and softirq", r"(__)?tcp_|inet_|(__)?ip_|(__)?dev_|(__)?netif|net_rx|(__)?napi"
     r"|process_backlog|loopback|(__)?sk_|(__)?sock_|lock_sock|release_sock|(__)?skb_|"
     r"kfree_skb|consume_skb|(__)?alloc_skb|handle_softirqs|(__)?do_softirq|(__)?local_bh"),
    ("copies, memory", r"(_|__)?copy_|rep_movs|(__)?mem(cpy|set|move)|(__)?kmem_|(__)?kmalloc"
     r"|kfree|(__)?slab|(__)?alloc_pages|(__)?free_|mem_cgroup|(__)?mod_memcg|page_counter"),
    ("system call entry and exit", r"entry_SYSCALL|do_syscall|syscall_|x64_sys_call|exit_to_user"
     r"|(__)?x64_sys_|(__)?rseq|task_work_run|get_signal|arch_do_signal|fpregs|srso|"
     r"__x86_return_thunk|clear_bhb"),
    ("files, descriptors", r"(__)?fget|(__)?fput|fdget|(__)?fdget|vfs_|ksys_|security_"),
]
GROUPS = [(g, re.compile(p)) for g, p in GROUPS]


def group(name):
    for title, pattern in GROUPS:
        if pattern.match(name):
            return title
    return "other"


def report(out, requests, top):
    info = dict(line.split() for line in open(out + ".info"))
    cpu_ns = int(info["cpu_ns"])
    requests = requests or int(info.get("requests", 0))
    samples = [[int(x, 16) for x in line.split()] for line in open(out + ".samples")]
    n = len(samples)
    if n == 0:
        sys.exit("no samples")
    user = [s[0] for s in samples if s[0] < KERNEL_START]
    kernel_n = n - len(user)
    names = user_names(out + ".maps", set(user))
    kernel = Kernel()
    per = cpu_ns / requests if requests else None

    def row(count, label):
        share = 100 * count / n
        ns = f"{per * count / n:8.1f} ns" if per else ""
        return f"{share:6.2f}% {ns}  {label}"

    print(f"{n} samples, {cpu_ns / 1e6:.0f} ms of CPU"
          + (f", {requests} requests: {per:.0f} ns per request (while sampled)" if per else ""))
    print(row(len(user), "user space"))
    print(row(kernel_n, "kernel"))
    for title, key in (("user, by function (inlined ones apart)", 0),
                       ("user, by function (inlined ones in their caller)", 1)):
        counts = collections.Counter(names.get(ip, ("?", "?"))[key] for ip in user)
        print(f"\n{title}:")
        for label, count in counts.most_common(top):
            print(row(count, label))
    ks = [s for s in samples if s[0] >= KERNEL_START]
    groups = collections.Counter(group(kernel.name(s[0])) for s in ks)
    print("\nkernel, by subsystem of the function sampled:")
    for label, count in groups.most_common():
        print(row(count, label))
    leaves = collections.Counter(kernel.name(s[0]) for s in ks)
    print("\nkernel, by function sampled:")
    for label, count in leaves.most_common(top):
        print(row(count, label))
    # Inclusive: each function once per sample whose chain passes through it.
    inclusive = collections.Counter()
    for s in ks:
        inclusive.update({kernel.name(ip) for ip in s[1:] if KERNEL_START <= ip < CONTEXT_MARKERS})
    print("\nkernel, by function on the call chain (inclusive):")
    for label, count in inclusive.most_common(top):
        print(row(count, label))


def main(argv):
    def option(name, default):
        if name in argv:
            i = argv.index(name)
            value = argv[i + 1]
            del argv[i:i + 2]
            return int(value)
        return default

    if len(argv) >= 2 and argv[1] == "record":
        period, port = option("--period-us", 50), option("--port", 0)
        if len(argv) != 5:
            sys.exit(__doc__)
        record(int(argv[2]), float(argv[3]), argv[4], period, port)
    elif len(argv) >= 2 and argv[1] == "report":
        requests, top = option("--requests", 0), option("--top", 25)
        if len(argv) != 3:
            sys.exit(__doc__)
        report(argv[2], requests, top)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(list(sys.argv))
