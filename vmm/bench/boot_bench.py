#!/usr/bin/env python3
"""Boot benchmark: Ferrovirt's VMM against QEMU microvm on the same /dev/kvm and test guest.

For each VMM, over N runs (medians printed):
  * start -> first serial byte: from just before the process is spawned to the first byte of
    the guest's serial output on the VMM's stdout;
  * start -> exit: until the process has exited after the guest's power-off;
  * peak RSS - guest memory touched: the VMM process's peak resident set minus the guest memory
    the run touched, i.e. what the VMM itself costs in memory. Peak RSS comes from GNU time
    (`/usr/bin/time -f %M`), not from this script's own wait4: a child forked from Python
    inherits Python's peak RSS in its rusage.
    Ours reports touched guest memory itself (`--stats`, mincore over guest RAM). QEMU's guest
    RAM is put in a file on /dev/shm (memory-backend-file) whose allocated size after the run is
    exactly what was touched (its firmware, qboot, counts as guest memory there).
A VMM that cannot run the guest is reported with its error; no figures are invented.
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

DEADLINE_S = 30


def run_once(argv, touched_from):
    """Runs argv; returns (first_byte_ms, exit_ms, maxrss_kib, touched_kib, rc, stdout, stderr)."""
    err = tempfile.TemporaryFile()
    rss_file = tempfile.NamedTemporaryFile(mode="r")
    argv = ["/usr/bin/time", "-f", "%M", "-o", rss_file.name, "timeout", str(DEADLINE_S)] + argv
    start = time.perf_counter_ns()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL)
    first = proc.stdout.read(1)
    first_ns = time.perf_counter_ns() if first else None
    rest = proc.stdout.read()
    proc.wait()
    end_ns = time.perf_counter_ns()
    err.seek(0)
    stderr = err.read().decode(errors="replace")
    touched = touched_from(stderr)
    rss_lines = [l for l in rss_file.read().splitlines() if l.strip().isdigit()]
    maxrss = int(rss_lines[-1]) if rss_lines else 0
    return (
        None if first_ns is None else (first_ns - start) / 1e6,
        (end_ns - start) / 1e6,
        maxrss,
        touched,
        proc.returncode,
        (first + rest).decode(errors="replace"),
        stderr,
    )


def ours(vmm, guest, memory_mib):
    argv = [vmm, "--kernel", guest, "--memory", str(memory_mib), "--serial", "tty", "--stats",
            "--transport", "mmio"]

    def touched(stderr):
        m = re.search(r"guest memory touched: (\d+) KiB", stderr)
        return int(m.group(1)) if m else None

    return argv, touched, lambda rc: rc == 0, lambda: None


def qemu(guest, memory_mib):
    shm = f"/dev/shm/ferrovirt-bench-qemu-{os.getpid()}"
    argv = [
        "qemu-system-x86_64", "-M", "microvm,memory-backend=mem", "-enable-kvm", "-cpu", "host",
        "-m", f"{memory_mib}M",
        "-object", f"memory-backend-file,id=mem,size={memory_mib}M,mem-path={shm},share=on",
        "-nodefaults", "-no-user-config", "-nographic", "-serial", "stdio", "-no-reboot",
        "-device", "isa-debug-exit,iobase=0xf4,iosize=4", "-kernel", guest,
    ]

    def touched(_stderr):
        try:
            st = os.stat(shm)
            return st.st_blocks * 512 // 1024
        except OSError:
            return None

    def cleanup():
        try:
            os.unlink(shm)
        except OSError:
            pass

    # isa-debug-exit: guest code 0 -> QEMU exit status 1.
    return argv, touched, lambda rc: rc == 1, cleanup


def bench(name, setup, runs):
    argv, touched_from, ok, cleanup = setup
    results = []
    for _ in range(runs):
        cleanup()
        r = run_once(argv, touched_from)
        cleanup()
        first_ms, exit_ms, maxrss, touched, rc, out, err = r
        if not ok(rc) or first_ms is None or "TEST serial ok" not in out:
            lines = [l for l in err.splitlines() if l.strip()]
            why = lines[-1] if lines else f"exit status {rc}, output {out[:200]!r}"
            return name, None, f"cannot run the guest (exit status {rc}): {why}"
        overhead = None if touched is None else maxrss - touched
        results.append((first_ms, exit_ms, maxrss, touched, overhead))
    med = lambda i: statistics.median(r[i] for r in results if r[i] is not None)
    return name, {
        "first": med(0), "exit": med(1), "rss": med(2), "touched": med(3), "overhead": med(4),
    }, None


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.abspath(os.path.join(here, "..", ".."))
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--vmm", default=os.path.join(root, "target", "release", "vmm"))
    p.add_argument("--guest", default="/var/cache/ferrovirt/guest-images/current/test-guests/serial.elf")
    p.add_argument("--runs", type=int, default=11)
    p.add_argument("--memory", type=int, default=64, help="guest memory, MiB")
    a = p.parse_args()
    if not os.path.exists("/usr/bin/time"):
        sys.exit("missing /usr/bin/time (GNU time): apt-get install -y time")
    for path, how in [(a.vmm, "cargo build -p vmm --release"),
                      (a.guest, "guest-images/build.sh")]:
        if not os.path.exists(path):
            sys.exit(f"missing {path}: build it with `{how}`")
    print(f"guest {a.guest}, {a.memory} MiB, median of {a.runs} runs, this host's /dev/kvm")
    rows = [
        bench("ferrovirt vmm", ours(a.vmm, a.guest, a.memory), a.runs),
        bench("qemu microvm -enable-kvm", qemu(a.guest, a.memory), a.runs),
    ]
    print(f"{'':28} {'start->1st byte':>16} {'start->exit':>12} {'peak RSS':>10} {'guest touched':>14} {'VMM overhead':>13}")
    for name, r, err in rows:
        if r is None:
            print(f"{name:28} {err}")
        else:
            print(f"{name:28} {r['first']:13.2f} ms {r['exit']:9.2f} ms {r['rss']:7d} KiB "
                  f"{r['touched']:10d} KiB {r['overhead']:9d} KiB")
    (_, o, _), (_, q, _) = rows
    if o and q:
        print(f"{'ratio qemu / ferrovirt':28} {q['first'] / o['first']:15.1f}x "
              f"{q['exit'] / o['exit']:11.1f}x {q['rss'] / o['rss']:9.1f}x {'':14} "
              f"{q['overhead'] / max(o['overhead'], 1):12.1f}x")
    else:
        print("ratio: not available (one VMM could not run the guest)")


if __name__ == "__main__":
    main()
