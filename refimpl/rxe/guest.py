"""A qemu guest with soft-RoCE (rdma_rxe) for running commands against real verbs devices.

The host kernel has no RDMA support, so real-device work runs in a guest: Debian's stock kernel
package (downloaded, not installed), a busybox-static initramfs holding the modules rdma_rxe needs,
the host root shared read-only over virtio-9p, tmpfs on /tmp and /run, read-write shares for the
work dir (at the same path as on the host), then a chroot. Inside, a veth pair carries two rxe
devices (``rxe0`` on ``vs0``, ``rxe1`` on ``vs1``) and ``rxe_lo`` sits on ``lo``. Commands run one
at a time; their exit code, stdout and stderr come back to the host.

Control: the guest's second serial port is a Unix socket on the host; the guest reads one
``run ID`` line per command and answers ``done ID RC``. The command, its output and the boot
log travel through a per-boot read-write share (cache=none, so both sides see writes at once).

Usage: ``python -m verbspec.refimpl.rxe.guest [--timeout S] -- CMD ARG...`` (docs/verbs.md).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import lzma
import os
import shlex
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

#: the Debian meta-package whose dependency names the kernel the guest boots
KERNEL_META = "linux-image-amd64"
#: modules loaded, with their dependencies first; crc32_generic leads: rdma_rxe asks the crypto
#: layer for crc32 when a link is added and fails ("failed to init crc32 algorithm") without it
MODULES = ("crc32_generic", "virtio_pci", "9pnet_virtio", "9p", "veth", "rdma_rxe", "ib_uverbs")
#: the rxe devices the guest brings up, and the netdev each sits on
RXE_LINKS = {"rxe0": "vs0", "rxe1": "vs1", "rxe_lo": "lo"}
#: the IPv4 addresses on the veth ends (the ends share one namespace, one subnet)
VETH_ADDRS = {"vs0": "10.77.0.1/24", "vs1": "10.77.0.2/24"}
QEMU = "qemu-system-x86_64"
BUSYBOX = Path("/bin/busybox")
#: where Debian's python3-pyverbs puts its package
PYVERBS_DIRS = (Path("/usr/lib/python3/dist-packages"),)
#: host paths the guest covers with its own tmpfs; a share under them must be mounted again
HIDDEN_IN_GUEST = (Path("/tmp"), Path("/run"))
#: where the per-boot control share appears inside the chroot
GUEST_XFER = "/run/verbspec-xfer"


class RxeGuestError(RuntimeError):
    """The guest could not be prepared, booted or driven."""


class MissingPrerequisite(RxeGuestError):
    """Something the guest needs is not on this machine; the message names it."""


class BootTimeout(RxeGuestError):
    """The guest did not report ready within the boot timeout."""


@dataclass(frozen=True)
class GuestImage:
    """A prepared kernel and initramfs, cached per kernel package version."""

    package: str
    version: str
    kernel: Path
    initramfs: Path


@dataclass(frozen=True)
class GuestResult:
    """One command's outcome inside the guest."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    seconds: float


# --- prerequisites ------------------------------------------------------------------------------


def _is_static_elf(path: Path) -> bool:
    """True when ``path`` is an ELF executable without a program interpreter (statically
    linked): the initramfs has no libc, so a dynamic busybox would not start there."""
    data = path.read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2:  # 64-bit only: the guest is x86-64
        return False
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    for i in range(phnum):
        p_type, = struct.unpack_from("<I", data, phoff + i * phentsize)
        if p_type == 3:  # PT_INTERP
            return False
    return True


def check_host() -> None:
    """Raise MissingPrerequisite naming the first missing host tool or package."""
    if shutil.which(QEMU) is None:
        raise MissingPrerequisite(f"{QEMU} is not on PATH (apt package qemu-system-x86)")
    if not BUSYBOX.exists() or not _is_static_elf(BUSYBOX):
        raise MissingPrerequisite(f"no statically linked {BUSYBOX} (apt package busybox-static)")
    for tool, package in (("rdma", "iproute2"), ("ip", "iproute2"), ("timeout", "coreutils"),
                          ("chroot", "coreutils"), ("apt-get", "apt"), ("dpkg-deb", "dpkg")):
        if shutil.which(tool) is None and not any(
                (Path(d) / tool).exists() for d in ("/usr/sbin", "/sbin", "/usr/bin", "/bin")):
            raise MissingPrerequisite(f"{tool} is not installed (apt package {package})")


def pyverbs_path() -> Path:
    """The directory holding Debian's ``pyverbs`` package (python3-pyverbs), for PYTHONPATH."""
    for d in PYVERBS_DIRS:
        if (d / "pyverbs" / "__init__.py").exists():
            return d
    raise MissingPrerequisite("pyverbs is not installed (apt package python3-pyverbs)")


# --- the kernel package -------------------------------------------------------------------------


def _run(argv: Sequence[str], what: str, cwd: Path | None = None) -> str:
    proc = subprocess.run(list(argv), cwd=cwd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RxeGuestError(f"{what} failed ({' '.join(argv)}): {proc.stderr.strip()}")
    return proc.stdout


def kernel_package() -> tuple[str, str]:
    """The versioned kernel package ``linux-image-amd64`` depends on, and its candidate version."""
    out = subprocess.run(["apt-cache", "depends", KERNEL_META], capture_output=True, text=True,
                         check=False)
    names = [ln.split(":", 1)[1].strip() for ln in out.stdout.splitlines()
             if ln.strip().startswith("Depends:") and "linux-image-" in ln]
    if out.returncode != 0 or not names:
        raise MissingPrerequisite(
            f"apt does not know the kernel package {KERNEL_META} (run apt-get update)")
    name = names[0]
    show = _run(["apt-cache", "show", "--no-all-versions", name], f"apt-cache show {name}")
    versions = [ln.split(":", 1)[1].strip() for ln in show.splitlines()
                if ln.startswith("Version:")]
    if not versions:
        raise MissingPrerequisite(f"apt has no candidate version of {name} (run apt-get update)")
    return name, versions[0]


def _modinfo_depends(ko: bytes) -> list[str]:
    """The ``depends=`` list of a kernel module's .modinfo section (ELF64 little-endian)."""
    shoff, = struct.unpack_from("<Q", ko, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", ko, 0x3A)

    def section(i: int) -> tuple[int, int, int]:
        base = shoff + i * shentsize
        name, = struct.unpack_from("<I", ko, base)
        offset, size = struct.unpack_from("<QQ", ko, base + 0x18)
        return name, offset, size

    _, stroff, _ = section(shstrndx)
    for i in range(shnum):
        name, offset, size = section(i)
        end = ko.index(b"\0", stroff + name)
        if ko[stroff + name:end] == b".modinfo":
            for entry in ko[offset:offset + size].split(b"\0"):
                if entry.startswith(b"depends="):
                    return [d for d in entry[8:].decode().split(",") if d]
            return []
    raise RxeGuestError("kernel module without a .modinfo section")


def _module_files(root: Path) -> dict[str, Path]:
    """Module name (dashes as underscores) -> its .ko file, under an unpacked lib/modules tree."""
    files: dict[str, Path] = {}
    for ko in root.rglob("*.ko*"):
        stem = ko.name.split(".ko", 1)[0].replace("-", "_")
        files[stem] = ko
    return files


def _read_module(path: Path) -> bytes:
    data = path.read_bytes()
    if path.name.endswith(".xz"):
        return lzma.decompress(data)
    if path.name.endswith(".gz"):
        return gzip.decompress(data)
    return data


def module_order(files: Mapping[str, Path], wanted: Sequence[str]) -> list[str]:
    """``wanted`` with every dependency, each module after the modules it depends on."""
    order: list[str] = []
    visiting: set[str] = set()

    def visit(name: str) -> None:
        if name in order:
            return
        if name not in files:
            raise RxeGuestError(f"the kernel package has no module {name}")
        if name in visiting:
            raise RxeGuestError(f"kernel module dependency loop through {name}")
        visiting.add(name)
        for dep in _modinfo_depends(_read_module(files[name])):
            visit(dep.replace("-", "_"))
        order.append(name)

    for name in wanted:
        visit(name)
    return order


# --- the initramfs ------------------------------------------------------------------------------


def _cpio(entries: Sequence[tuple[str, int, bytes, int]]) -> bytes:
    """A newc cpio archive of (path, mode, data, rdev) entries, then its trailer."""
    out = io.BytesIO()

    def put(name: str, mode: int, data: bytes, rdev: int, ino: int) -> None:
        fields = (ino, mode, 0, 0, 1, 0, len(data), 0, 0, rdev >> 8, rdev & 0xFF,
                  len(name) + 1, 0)
        out.write(b"070701" + b"".join(b"%08X" % f for f in fields))
        out.write(name.encode() + b"\0")
        out.write(b"\0" * (-out.tell() % 4))
        out.write(data)
        out.write(b"\0" * (-out.tell() % 4))

    for ino, (name, mode, data, rdev) in enumerate(entries, start=1):
        put(name, mode, data, rdev, ino)
    put("TRAILER!!!", 0, b"", 0, 0)
    return out.getvalue()


#: the initramfs's /init: modules, the host root, the control share, then the per-boot script
INIT = r"""#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
fail() { echo "verbspec-guest: $*"; echo "fail $*" > /dev/ttyS1; poweroff -f; }
for m in $(cat /lib/modules/order); do
  insmod /lib/modules/$m.ko || fail "insmod $m"
done
mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose,msize=512000 hostroot /root \
  || fail "mounting the host root"
mount -t tmpfs tmpfs /root/run || fail "tmpfs on /run"
mkdir -p /root/run/verbspec-xfer
mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 xfer /root/run/verbspec-xfer \
  || fail "mounting the control share"
. /root/run/verbspec-xfer/boot.sh
poweroff -f
"""

#: the per-boot script (sourced by /init): shares, network, rxe, then the command loop
BOOT = r"""R=/root
X=$R{xfer}
for d in proc sys dev tmp; do [ -d $R/$d ] || fail "no /$d on the host root"; done
mount -t proc proc $R/proc
mount -t sysfs sys $R/sys
mount -t devtmpfs dev $R/dev
mkdir -p $R/dev/shm
mount -t tmpfs tmpfs $R/dev/shm || fail "tmpfs on /dev/shm"
mount -t tmpfs tmpfs $R/tmp
{shares}
chroot $R /bin/sh -e -c '{setup}' > $X/setup.log 2>&1 \
  || fail "network/rxe setup: $(cat $X/setup.log)"
stty -F /dev/ttyS1 raw -echo
exec 3<>/dev/ttyS1
echo "ready" >&3
while read -r verb id <&3; do
  case "$verb" in
    run)
      chroot $R /bin/sh {xfer}/$id/cmd.sh < /dev/null > $X/$id/stdout 2> $X/$id/stderr
      echo "done $id $?" >&3 ;;
    halt) break ;;
  esac
done
"""


def _setup_commands() -> str:
    """The in-chroot shell lines that build the veth pair and the rxe devices."""
    ends = list(VETH_ADDRS)
    lines = ["ip link set lo up", f"ip link add {ends[0]} type veth peer name {ends[1]}"]
    for dev, addr in VETH_ADDRS.items():
        lines += [f"ip addr add {addr} dev {dev}", f"ip link set {dev} up"]
    lines += [f"rdma link add {rxe} type rxe netdev {net}" for rxe, net in RXE_LINKS.items()]
    # the veth ends' IPv6 link-local addresses are the devices' GID 0; while duplicate address
    # detection holds them tentative, a queue pair's move to RTR on them times out
    lines.append("i=0; while [ $i -lt 200 ] && ip -6 addr show tentative | grep -q inet6; "
                 "do sleep 0.1; i=$((i+1)); done")
    return "; ".join(lines)


def cache_dir() -> Path:
    """Where prepared images live: $VERBSPEC_RXE_CACHE, else ~/.cache/verbspec/rxe."""
    if env := os.environ.get("VERBSPEC_RXE_CACHE"):
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "verbspec" / "rxe"


def prepare(cache: Path | None = None, log=None) -> GuestImage:
    """Download and unpack the kernel package (once per version) and build the initramfs.

    The initramfs's name carries a hash of its inputs (module list, /init, busybox), so a changed
    harness builds a new one beside the old."""
    check_host()
    cache = cache or cache_dir()
    busybox = BUSYBOX.read_bytes()
    key = hashlib.sha256(repr(MODULES).encode() + INIT.encode() + busybox).hexdigest()[:16]
    try:
        name, version = kernel_package()
    except MissingPrerequisite:
        # apt's lists are gone (apt-get clean, a slim image): an image prepared before will do
        ready = sorted(d for d in cache.glob(f"{KERNEL_META.rsplit('-', 1)[0]}-*_*")
                       if (d / "vmlinuz").exists() and (d / f"initramfs-{key}.cpio").exists())
        if not ready:
            raise
        name, version = ready[-1].name.split("_", 1)
    home = cache / f"{name}_{version}"
    kernel = home / "vmlinuz"
    initramfs = home / f"initramfs-{key}.cpio"
    if kernel.exists() and initramfs.exists():
        return GuestImage(name, version, kernel, initramfs)
    home.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=home) as tmp:
        work = Path(tmp)
        if log:
            log(f"downloading {name} {version}")
        _run(["apt-get", "download", f"{name}={version}"], f"downloading {name}", cwd=work)
        debs = list(work.glob("*.deb"))
        if not debs:
            raise RxeGuestError(f"apt-get download {name} left no .deb")
        tree = work / "tree"
        _run(["dpkg-deb", "-x", str(debs[0]), str(tree)], f"unpacking {debs[0].name}")
        vmlinuz = sorted((tree / "boot").glob("vmlinuz-*"))
        if not vmlinuz:
            raise RxeGuestError(f"{name} holds no boot/vmlinuz-*")
        files = _module_files(tree / "lib" / "modules")
        order = module_order(files, MODULES)
        dirs = ("bin", "dev", "proc", "sys", "root", "lib", "lib/modules")
        entries: list[tuple[str, int, bytes, int]] = [(d, 0o040755, b"", 0) for d in dirs]
        entries.append(("dev/console", 0o020600, b"", (5 << 8) | 1))
        entries.append(("bin/busybox", 0o100755, busybox, 0))
        entries.append(("init", 0o100755, INIT.encode(), 0))
        entries.append(("lib/modules/order", 0o100644, "\n".join(order).encode() + b"\n", 0))
        entries += [(f"lib/modules/{m}.ko", 0o100644, _read_module(files[m]), 0) for m in order]
        partial = initramfs.with_suffix(".part")
        partial.write_bytes(_cpio(entries))
        partial.replace(initramfs)
        if not kernel.exists():
            shutil.copyfile(vmlinuz[-1], kernel.with_suffix(".part"))
            kernel.with_suffix(".part").replace(kernel)
    return GuestImage(name, version, kernel, initramfs)


# --- the running guest --------------------------------------------------------------------------


@dataclass
class RxeGuest:
    """A booted guest; ``run`` executes a command inside it. Use as a context manager, or call
    ``close`` (it halts the guest)."""

    image: GuestImage
    work_dir: Path
    shares: tuple[Path, ...]
    boot_seconds: float
    _proc: subprocess.Popen
    _ctl: socket.socket
    _xfer: tempfile.TemporaryDirectory
    _buf: bytes = b""
    _count: int = 0

    @classmethod
    def start(cls, work_dir: Path, shares: Sequence[Path] = (), boot_timeout: float = 240.0,
              image: GuestImage | None = None, memory_mb: int = 2048, cpus: int = 2) -> RxeGuest:
        """Boot a guest with ``work_dir`` shared read-write at its own path. ``shares`` are more
        host directories made visible at their own paths (read-write); the interpreter's prefix is
        added when the guest's tmpfs would hide it (a venv under /tmp)."""
        work_dir = Path(work_dir).resolve()
        if not work_dir.is_dir():
            raise RxeGuestError(f"work dir {work_dir} is not a directory")
        image = image or prepare()
        extra = [Path(s).resolve() for s in shares]
        for s in extra:
            if not s.is_dir():
                raise RxeGuestError(f"share {s} is not a directory")
        prefix = Path(sys.prefix).resolve()
        if any(prefix.is_relative_to(h) for h in HIDDEN_IN_GUEST) and not any(
                prefix.is_relative_to(s) for s in [work_dir, *extra]):
            extra.append(prefix)
        all_shares = [work_dir, *extra]
        xfer = tempfile.TemporaryDirectory(prefix="verbspec-rxe-")
        xdir = Path(xfer.name)
        mounts = []
        # a share inside another mounts after it
        for i, s in sorted(enumerate(all_shares), key=lambda t: len(t[1].parts)):
            target = "$R" + shlex.quote(str(s))
            mounts.append(f"mkdir -p {target} 2>/dev/null; mount -t 9p -o trans=virtio,"
                          f"version=9p2000.L,msize=512000,cache=mmap share{i} {target} "
                          f"|| fail 'mounting the share {s}'")
        (xdir / "boot.sh").write_text(BOOT.format(
            xfer=GUEST_XFER, shares="\n".join(mounts), setup=_setup_commands()))
        sock = xdir / "ctl.sock"
        console = xdir / "console.log"
        argv = [QEMU, "-accel", "tcg,thread=multi", "-cpu", "max", "-m", str(memory_mb),
                "-smp", str(cpus), "-nodefaults", "-display", "none", "-no-reboot",
                "-kernel", str(image.kernel), "-initrd", str(image.initramfs),
                "-append", "console=ttyS0 panic=-1 loglevel=4",
                "-serial", f"file:{console}",
                "-chardev", f"socket,id=ctl,path={sock},server=on,wait=off",
                "-serial", "chardev:ctl"]
        fsdevs = [("hostroot", Path("/"), True), ("xfer", xdir, False)]
        fsdevs += [(f"share{i}", s, False) for i, s in enumerate(all_shares)]
        for tag, path, ro in fsdevs:
            argv += ["-fsdev", f"local,id={tag},path={path},security_model=none,multidevs=remap"
                     + (",readonly=on" if ro else ""),
                     "-device", f"virtio-9p-pci,fsdev={tag},mount_tag={tag}"]
        t0 = time.monotonic()
        qlog = open(xdir / "qemu.log", "wb")  # noqa: SIM115 (lives as long as the guest)
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=qlog, stderr=qlog)
        qlog.close()
        ctl = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        guest = cls(image, work_dir, tuple(extra), 0.0, proc, ctl, xfer)
        try:
            while True:
                if proc.poll() is not None:
                    raise RxeGuestError(f"qemu exited ({proc.returncode}) before the guest "
                                        f"booted: {guest._log_tail()}")
                if time.monotonic() - t0 > 10:
                    raise RxeGuestError(f"qemu made no control socket: {guest._log_tail()}")
                try:
                    ctl.connect(str(sock))
                    break
                except (FileNotFoundError, ConnectionRefusedError):
                    time.sleep(0.05)
            line = guest._line(t0 + boot_timeout, "boot")
            if line.startswith("fail "):
                raise RxeGuestError(f"guest setup failed: {line[5:]}\n{guest._log_tail()}")
            if line != "ready":
                raise RxeGuestError(f"unexpected word from the guest: {line!r}")
        except BaseException:
            guest.close()
            raise
        guest.boot_seconds = time.monotonic() - t0
        return guest

    def _log_tail(self, lines: int = 30) -> str:
        out = []
        for name in ("qemu.log", "console.log"):
            p = Path(self._xfer.name) / name
            if p.exists():
                text = p.read_text(errors="replace").strip().splitlines()[-lines:]
                if text:
                    out.append(f"--- {name} ---\n" + "\n".join(text))
        return "\n".join(out) or "(no output)"

    def _line(self, deadline: float, what: str) -> str:
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or self._proc.poll() is not None:
                if self._proc.poll() is not None:
                    raise RxeGuestError(f"the guest stopped during {what}: {self._log_tail()}")
                raise (BootTimeout if what == "boot" else RxeGuestError)(
                    f"the guest was not {'ready' if what == 'boot' else 'done'} within the "
                    f"timeout ({what}): {self._log_tail()}")
            self._ctl.settimeout(min(left, 1.0))
            try:
                chunk = self._ctl.recv(4096)
            except TimeoutError:
                continue
            if not chunk:
                raise RxeGuestError(f"the guest closed its control port: {self._log_tail()}")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return line.decode(errors="replace").strip()

    def run(self, argv: Sequence[str], cwd: Path | None = None,
            env: Mapping[str, str] | None = None, timeout: float = 600.0) -> GuestResult:
        """Run ``argv`` in the guest's chroot, in ``cwd`` (default: the work dir), with PATH
        and LANG from the host plus ``env``; the guest ends it after ``timeout`` seconds
        (exit code 124, as ``timeout`` reports)."""
        if not argv:
            raise ValueError("run: argv is empty")
        if timeout <= 0:
            raise ValueError(f"run: timeout must be positive, got {timeout}")
        base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/tmp",
                "LANG": "C.UTF-8", "TERM": "dumb"}
        base.update(env or {})
        for k in base:
            if not k.isidentifier():
                raise ValueError(f"run: environment name {k!r} is not a shell identifier")
        self._count += 1
        cid = str(self._count)
        box = Path(self._xfer.name) / cid
        box.mkdir()
        script = [f"cd {shlex.quote(str(cwd or self.work_dir))} || exit 125"]
        script += [f"export {k}={shlex.quote(v)}" for k, v in base.items()]
        script.append(f"exec timeout -k 5 {timeout:g} " + shlex.join(argv))
        (box / "cmd.sh").write_text("\n".join(script) + "\n")
        t0 = time.monotonic()
        self._ctl.sendall(f"run {cid}\n".encode())
        line = self._line(t0 + timeout + 60, f"command {shlex.join(argv)}")
        verb, got, rc = (line.split() + ["", "", ""])[:3]
        if verb != "done" or got != cid or not rc.lstrip("-").isdigit():
            raise RxeGuestError(f"unexpected word from the guest: {line!r}")
        return GuestResult(tuple(argv), int(rc), (box / "stdout").read_text(errors="replace"),
                           (box / "stderr").read_text(errors="replace"), time.monotonic() - t0)

    def close(self) -> None:
        """Halt the guest and remove the control share."""
        if self._proc.poll() is None:
            try:
                self._ctl.sendall(b"halt\n")
                self._proc.wait(timeout=20)
            except (OSError, subprocess.TimeoutExpired):
                self._proc.kill()
                self._proc.wait()
        self._ctl.close()
        self._xfer.cleanup()

    def __enter__(self) -> RxeGuest:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m verbspec.refimpl.rxe.guest",
        description="Boot a qemu guest with soft-RoCE devices (rxe0, rxe1 over a veth pair; "
                    "rxe_lo on lo), run CMD inside it, print its output, exit with its code.",
        epilog="exit codes: CMD's own; 125: the guest could not be prepared or booted")
    parser.add_argument("--work-dir", type=Path, default=Path.cwd(),
                        help="shared read-write at its own path and the command's cwd "
                             "(default: the current directory)")
    parser.add_argument("--share", type=Path, action="append", default=[],
                        help="another host directory to show at its own path (repeatable)")
    parser.add_argument("--timeout", type=float, default=600.0, help="command timeout, seconds")
    parser.add_argument("--boot-timeout", type=float, default=240.0, help="seconds")
    parser.add_argument("--prepare-only", action="store_true",
                        help="prepare the cached kernel and initramfs, print where, and stop")
    parser.add_argument("cmd", nargs="*", help="the command (after --)")
    args = parser.parse_args(argv)
    try:
        if args.prepare_only:
            image = prepare(log=lambda m: print(m, file=sys.stderr))
            print(f"{image.package} {image.version}\n{image.kernel}\n{image.initramfs}")
            return 0
        if not args.cmd:
            parser.error("no command given (put it after --)")
        image = prepare(log=lambda m: print(m, file=sys.stderr))
        with RxeGuest.start(args.work_dir, args.share, args.boot_timeout, image) as guest:
            print(f"guest ready in {guest.boot_seconds:.1f} s", file=sys.stderr)
            res = guest.run(args.cmd, timeout=args.timeout)
    except RxeGuestError as exc:
        print(f"rxe guest: {exc}", file=sys.stderr)
        return 125
    sys.stdout.write(res.stdout)
    sys.stderr.write(res.stderr)
    return res.returncode


if __name__ == "__main__":
    sys.exit(main())
