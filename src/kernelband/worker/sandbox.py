"""Confine a worker's file-system access before it runs untrusted code.

Two layers:

* Landlock (Linux >= 5.13, unprivileged): writes are allowed only beneath the
  worker's own directory and a few device files; reads only beneath the
  interpreter's installation, the system directories and the worker's own
  directory. The kernel enforces it, for ctypes and subprocesses too.
* A Python audit hook that refuses `open` for writing outside the same
  directories. It is the only layer where Landlock is missing, and it is
  best-effort there: code that calls libc directly can get past it.

`apply()` returns which layers are active, so the evaluator can report it.
"""

from __future__ import annotations

import ctypes
import os
import sys

_SYS_CREATE_RULESET = 444
_SYS_ADD_RULE = 445
_SYS_RESTRICT_SELF = 446
_PR_SET_NO_NEW_PRIVS = 38
_RULE_PATH_BENEATH = 1

_EXECUTE = 1 << 0
_WRITE_FILE = 1 << 1
_READ_FILE = 1 << 2
_READ_DIR = 1 << 3
_REMOVE_DIR = 1 << 4
_REMOVE_FILE = 1 << 5
_MAKE_CHAR = 1 << 6
_MAKE_DIR = 1 << 7
_MAKE_REG = 1 << 8
_MAKE_SOCK = 1 << 9
_MAKE_FIFO = 1 << 10
_MAKE_BLOCK = 1 << 11
_MAKE_SYM = 1 << 12
_REFER = 1 << 13  # ABI 2
_TRUNCATE = 1 << 14  # ABI 3

_READ = _EXECUTE | _READ_FILE | _READ_DIR
_WRITE_V1 = (
    _WRITE_FILE | _REMOVE_DIR | _REMOVE_FILE | _MAKE_CHAR | _MAKE_DIR | _MAKE_REG
    | _MAKE_SOCK | _MAKE_FIFO | _MAKE_BLOCK | _MAKE_SYM
)

# Not /proc as a whole: /proc/<pid>/environ of the parent would give its secrets
# away. Not /tmp, /home or /run either: other workers' files and secrets live there.
_SYSTEM_READ_ROOTS = ("/usr", "/lib", "/lib32", "/lib64", "/bin", "/sbin", "/etc", "/opt", "/sys",
                      "/proc/cpuinfo", "/proc/meminfo", "/proc/stat", "/proc/sys", "/proc/driver",
                      "/proc/filesystems", "/proc/self/", "/run/nvidia-persistenced",
                      "/var/run/nvidia-persistenced")
_DEVICE_WRITE_PREFIXES = ("/dev/null", "/dev/zero", "/dev/urandom", "/dev/random", "/dev/nvidia", "/dev/dri")


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def read_roots(extra: list[str]) -> list[str]:
    roots = list(_SYSTEM_READ_ROOTS) + [f"/proc/{os.getpid()}"]
    # /dev, but not /dev/shm: the evaluator's files live there.
    if os.path.isdir("/dev"):
        roots += [os.path.join("/dev", n) for n in os.listdir("/dev") if n != "shm"]
    roots += [sys.prefix, sys.base_prefix, sys.exec_prefix]
    roots += [p for p in sys.path if p]
    for mod in ("torch", "triton", "kernelband", "numpy"):
        m = sys.modules.get(mod)
        if m is not None and getattr(m, "__file__", None):
            roots.append(os.path.dirname(os.path.dirname(m.__file__)))
    roots += extra
    return roots


def write_roots(extra: list[str]) -> list[str]:
    devices = []
    if os.path.isdir("/dev"):
        for name in os.listdir("/dev"):
            path = os.path.join("/dev", name)
            if path.startswith(_DEVICE_WRITE_PREFIXES):
                devices.append(path)
    return devices + extra


def _landlock(read: list[str], write: list[str]) -> str | None:
    """Returns None on success, else why Landlock could not be applied."""
    if not sys.platform.startswith("linux"):
        return "not Linux"
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    abi = libc.syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    if abi < 1:
        return f"Landlock unavailable ({os.strerror(ctypes.get_errno())})"
    write_access = _WRITE_V1 | (_REFER if abi >= 2 else 0) | (_TRUNCATE if abi >= 3 else 0)
    handled = _READ | write_access
    attr = _RulesetAttr(handled, 0, 0)
    size = ctypes.sizeof(_RulesetAttr) if abi >= 4 else 8
    fd = libc.syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if fd < 0:
        return f"landlock_create_ruleset failed ({os.strerror(ctypes.get_errno())})"
    try:
        def add(path: str, access: int) -> None:
            try:
                pfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                return
            try:
                if not os.path.isdir(path):
                    # Directory-only rights are refused on files.
                    access &= _EXECUTE | _WRITE_FILE | _READ_FILE | _TRUNCATE
                rule = _PathBeneathAttr(access & handled, pfd)
                libc.syscall(_SYS_ADD_RULE, ctypes.c_int(fd), ctypes.c_int(_RULE_PATH_BENEATH),
                             ctypes.byref(rule), ctypes.c_uint32(0))
            finally:
                os.close(pfd)

        for path in dict.fromkeys(read):
            add(path, _READ)
        for path in dict.fromkeys(write):
            add(path, _READ | write_access)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return f"prctl(NO_NEW_PRIVS) failed ({os.strerror(ctypes.get_errno())})"
        if libc.syscall(_SYS_RESTRICT_SELF, ctypes.c_int(fd), ctypes.c_uint32(0)) != 0:
            return f"landlock_restrict_self failed ({os.strerror(ctypes.get_errno())})"
    finally:
        os.close(fd)
    return None


def _install_audit_hook(write: list[str]) -> None:
    allowed = tuple(os.path.realpath(p) for p in write)

    def allowed_path(path: str) -> bool:
        real = os.path.realpath(path)
        return any(real == a or real.startswith(a.rstrip("/") + "/") for a in allowed)

    def hook(event: str, args: tuple) -> None:
        if event == "open" and len(args) >= 2:
            path, mode = args[0], args[1]
            flags = args[2] if len(args) > 2 else 0
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC))
            if writing and isinstance(path, (str, bytes)) and not allowed_path(os.fsdecode(path)):
                raise PermissionError(f"kernelband sandbox: writing {os.fsdecode(path)!r} is not allowed")
        elif event in ("os.remove", "os.rmdir", "os.rename", "os.mkdir", "shutil.rmtree", "os.symlink"):
            path = args[0]
            if isinstance(path, (str, bytes)) and not allowed_path(os.fsdecode(path)):
                raise PermissionError(f"kernelband sandbox: {event} on {os.fsdecode(path)!r} is not allowed")

    sys.addaudithook(hook)


def apply(workdir: str, extra_read: list[str] | None = None) -> dict:
    """Confine this process to `workdir` for writes. Returns {'landlock': bool, 'audit_hook': True, 'note': str}."""
    write = write_roots([workdir])
    read = read_roots([workdir] + (extra_read or []))
    note = _landlock(read, write)
    _install_audit_hook(write)
    return {"landlock": note is None, "audit_hook": True, "note": note or "landlock + audit hook"}
