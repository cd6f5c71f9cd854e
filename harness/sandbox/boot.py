"""First code a sandbox child runs: lock itself down, then run one phase and report over a pipe.

Runs under `python -I` before torch or any candidate code is imported, so it uses the standard
library only. The parent started it inside bubblewrap's view and namespaces (view.py), in its
cgroup. Order matters: rlimits first (bound what follows), then, once the job is known: for a
phase that runs untrusted code, the switch to an unprivileged uid (it owns nothing of the
server's, and its capabilities are gone with root); CUDA initialisation (device nodes in the
view are world-accessible); Landlock (writes only to its scratch; for untrusted code reads only
the view's folders too); no capabilities and no_new_privs; the seccomp filter; and only then
the phase. The parent passes its settings on stdin, never in argv or the environment.

Settings come in two parts (protocol.py): one line of spawn settings (cgroup, limits,
namespaces: the same for every job of a configuration), then the claim (phase, job, workdir,
environment and, for a trusted phase only, the HMAC key and nonce of its result). A fresh
child gets both at once. A warm spare (spares.py) gets the first, imports torch and triton,
says "R" on the result pipe and waits; the claim comes when the parent claims it, and
everything that depends on the job is applied only then, before the phase runs. Either way
one process serves exactly one phase.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import hmac
import json
import os
import resource
import select
import sys
import traceback

from harness.sandbox import capabilities, landlock, seccomp
from harness.sandbox.protocol import (
    CUDA_FAILED,
    Claim,
    IsolationRecord,
    SpawnSettings,
    claim_from,
    spawn_from,
)

_libc = ctypes.CDLL(None, use_errno=True)

_CLONE_NEWUSER, _CLONE_NEWNET = 0x10000000, 0x40000000


def _apply_rlimits(spawn: SpawnSettings) -> list[str]:
    limits = spawn.limits
    applied = []
    for name, value in (
        ("RLIMIT_CPU", limits.cpu_s),
        ("RLIMIT_FSIZE", limits.max_file_bytes),
        ("RLIMIT_NOFILE", limits.max_open_files),
        ("RLIMIT_CORE", 0),
    ):
        resource.setrlimit(getattr(resource, name), (value, value))
        applied.append(name)
    if os.getuid() != 0:
        resource.setrlimit(resource.RLIMIT_NPROC, (limits.max_pids, limits.max_pids))
        applied.append("RLIMIT_NPROC")
    if not spawn.cuda and not limits.cgroup:
        # Only without CUDA: RLIMIT_AS makes cudaGetDeviceCount fail (RELIABILITY 3.3).
        resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
        applied.append("RLIMIT_AS")
    return applied


def unshare_net() -> str:
    """A network namespace made here: only where the parent could not make one (no unshare)."""
    if _libc.unshare(_CLONE_NEWNET) == 0:
        return "netns"
    uid, gid = os.getuid(), os.getgid()
    if _libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNET) == 0:
        with open("/proc/self/setgroups", "w") as f:
            f.write("deny")
        with open("/proc/self/uid_map", "w") as f:
            f.write(f"{uid} {uid} 1")
        with open("/proc/self/gid_map", "w") as f:
            f.write(f"{gid} {gid} 1")
        return "userns+netns"
    return ""


def _send(fd: int, key: bytes, nonce: str, payload: dict, reporter: int) -> None:
    """The result: HMAC-signed for a trusted phase; an untrusted one has no key ("-"), and
    the parent treats what it says as data to check, never as a verdict.

    Only `reporter`, the process the parent started, reports. A candidate that forks makes a
    copy of the whole phase: a copy that unwinds back through the phase's code (its run()
    returned or raised) would send a second message into the same pipe, and the parent would
    read the two as one malformed message (CI, 2026-11-30: two whole messages, a forked
    copy's and the phase's). Such a copy ends here, silently."""
    if os.getpid() != reporter:
        os._exit(0)
    payload["nonce"] = nonce
    body = json.dumps(payload, default=str).encode()
    mac = hmac.new(key, body, hashlib.sha256).hexdigest().encode() if key else b"-"
    data = mac + b"\n" + body
    while data:
        n = os.write(fd, data)
        data = data[n:]
    os.close(fd)


class _Stdin:
    """Unbuffered reads of fd 0, so select() on it tells the truth about what is still to come."""

    def __init__(self) -> None:
        self.buf = b""

    def line(self) -> bytes:
        while b"\n" not in self.buf:
            chunk = os.read(0, 1 << 16)
            if not chunk:
                break
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return line

    def rest(self, wait_s: float | None = None) -> bytes:
        """Everything up to EOF; b"" when nothing arrived within `wait_s`."""
        if wait_s is not None and not self.buf:
            ready, _, _ = select.select([0], [], [], wait_s)
            if not ready:
                return b""
        while chunk := os.read(0, 1 << 20):
            self.buf += chunk
        data, self.buf = self.buf, b""
        return data


def _namespace_record(spawn: SpawnSettings, iso: IsolationRecord) -> None:
    names = spawn.namespaces.split("+") if spawn.namespaces else []
    if "pid" in names:
        iso.pid, iso.ipc = "pidns", "ipcns"
        iso.mounts = "bwrap view: allow-listed reads, private /dev, capped /tmp and /dev/shm"
        iso.sockets = "not in the view (no host folder holding sockets is bound)"
    else:
        iso.pid = iso.mounts = iso.ipc = iso.sockets = spawn.ns_note
    if "net" in names:
        iso.network = "netns"
    elif not spawn.isolate_net:
        iso.network = "none (not asked for by this phase)"
    if not spawn.isolate_fs:
        iso.filesystem = "none (not asked for by this phase)"


def _lock_process(spawn: SpawnSettings, iso: IsolationRecord) -> None:
    """What is the same for every job of this spawn configuration: rlimits, the record.

    Done before anything is imported (a warm spare imports torch afterwards), and while the
    process has one thread, which unshare(CLONE_NEWUSER) needs."""
    iso.cgroup = spawn.cgroup_kind if spawn.limits.cgroup else "none"
    iso.rlimits = _apply_rlimits(spawn)
    _namespace_record(spawn, iso)
    if spawn.isolate_net and iso.network.startswith("none"):  # no bwrap here
        iso.network = unshare_net() or "none (no network namespace could be made)"


def _lock_job(spawn: SpawnSettings, claim: Claim, wrapped: bool, iso: IsolationRecord) -> None:
    """What depends on the job (the uid, Landlock's folders), before any job code."""
    if spawn.untrusted and spawn.sandbox_uid is not None:
        iso.uid = capabilities.become(spawn.sandbox_uid)
    else:
        iso.uid = f"{os.getuid()} (trusted: the worker's own)"
    os.makedirs(claim.workdir, exist_ok=True)
    if spawn.cuda:
        # The GPU's device nodes are in the view (the parent made sure they exist: the first
        # CUDA start on a fresh machine makes them, which needs root and the host's /dev).
        import torch  # noqa: PLC0415

        try:
            torch.cuda.init()
            torch.empty(1, device="cuda").add_(1)
            torch.cuda.synchronize()
        except Exception as exc:  # noqa: BLE001  (the parent decides what it means)
            raise OSError(f"{CUDA_FAILED} ({spawn.namespaces or 'no namespaces'}): {exc}") from exc
    if spawn.isolate_fs:
        writable = [claim.workdir, *spawn.writes, "/tmp"]
        readable = list(spawn.reads) if spawn.untrusted else None
        iso.filesystem = (
            landlock.restrict(writable, spawn.isolate_net, spawn.isolate_net, readable) or "none"
        )
    iso.capabilities = capabilities.drop_all()
    iso.no_new_privs = capabilities.no_new_privs()
    iso.seccomp = "none (a tool wraps this child)" if wrapped else seccomp.install()
    if spawn.undumpable:
        capabilities.undumpable()


def _warm_up(result_fd: int, spawn: SpawnSettings) -> str:
    """A spare imports what every phase imports while it waits; "" when it is fit to serve.

    Landlock (applied at the claim) restricts the calling thread and threads it starts later,
    not threads that already exist, and it does not revoke write access through files that are
    already open. So a spare that ends up with a second thread (numpy's OpenBLAS pool unless
    OPENBLAS_NUM_THREADS=1; CUDA, which must not start before the claim) or a writable fd, or
    that finds no Landlock at all, is not used: the parent starts a fresh child instead."""
    try:
        import torch  # noqa: F401, PLC0415

        with contextlib.suppress(ImportError):
            import triton  # noqa: F401, PLC0415
            import triton.language  # noqa: F401, PLC0415
        from harness import phases  # noqa: F401, PLC0415

        if spawn.cuda and not spawn.untrusted:
            # The judge builds the torch.compile baseline, and importing Dynamo (3.9 s) and
            # AOTAutograd (functorch.compile, 1.0 s) takes seconds of every full verification.
            # Not Inductor's lowering or compile_fx: on the GPU image (torch 2.11) importing
            # them starts a second thread, and such a spare is never used ("2 threads after
            # import"; H200, 2026-12-03, results/spare_imports_probe_h200.json).
            import functorch.compile  # noqa: F401, PLC0415
            import torch._dynamo  # noqa: F401, PLC0415
    except Exception as exc:  # noqa: BLE001  (a fresh child will report it properly)
        return f"import failed: {exc!r}"
    if landlock.abi() < 1:
        # Without Landlock the phase that runs beside the spare could ptrace it.
        return "no Landlock on this kernel"
    threads = len(os.listdir("/proc/self/task"))
    if threads != 1:
        return f"{threads} threads after import"
    for name in os.listdir("/proc/self/fd"):
        if int(name) in (0, 1, 2, result_fd):
            continue
        try:
            with open(f"/proc/self/fdinfo/{name}") as f:
                flags = int(f.readline().split()[1], 8)
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:  # the fd of the directory listing itself, closed by now
            continue
        if flags & (os.O_WRONLY | os.O_RDWR):
            return f"writable fd {name} ({target}) open after import"
    return ""


def main() -> None:
    sys.dont_write_bytecode = True  # `-I` ignores PYTHONDONTWRITEBYTECODE; no .pyc in the venv
    reporter = os.getpid()
    settings_file = os.environ.pop("KF_SETTINGS_FILE", "")
    stdin = _Stdin()
    claim: Claim | None = None
    if settings_file:  # a wrapped (ncu, compute-sanitizer) child: both parts in one private file
        with open(settings_file) as f:
            data = json.load(f)
        os.unlink(settings_file)
        spawn = spawn_from(data["spawn"])
        claim = claim_from(data["claim"])
    else:  # first line: the spawn settings; the claim (key, nonce, workdir...) follows later
        spawn = spawn_from(json.loads(stdin.line()))
    fd = spawn.fd
    if fd is None:  # opened now, before Landlock makes its folder read-only
        if spawn.result_path is None:
            raise SystemExit("sandbox settings name neither a result fd nor a result file")
        fd = os.open(spawn.result_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    else:
        os.set_inheritable(fd, False)  # grandchildren (nvcc, ninja, a fork bomb) don't get it
    iso = IsolationRecord()
    setup_error = ""
    try:
        _lock_process(spawn, iso)
    except OSError as exc:  # a limit we asked for could not be applied: fail closed
        setup_error = str(exc)
    if spawn.warm:
        unfit = f"sandbox setup: {setup_error}" if setup_error else _warm_up(fd, spawn)
        if unfit:  # the parent reads why, logs it and starts a fresh child instead
            os.write(fd, b"X" + unfit.encode()[:2000])
            os._exit(0)
        os.write(fd, b"R")
        # Idle until claimed. EOF (the parent died or dropped us) or a long wait ends it.
        data = stdin.rest(wait_s=spawn.idle_s)
        if not data:
            os._exit(0)
        claim = claim_from(json.loads(data))
    elif claim is None:
        claim = claim_from(json.loads(stdin.rest()))
    # The job's own environment (HOME, TMPDIR, caches: all under its workdir) replaces
    # whatever the process started with (a spare's placeholder, bwrap's PWD) before any job
    # code runs. Not under a wrapping tool: ncu and compute-sanitizer hand their injection
    # library to CUDA through variables it reads at its first call (without them the judge
    # died with SIGSEGV under ncu, H200 2026-11-27); the tool started from the job's env.
    if not settings_file:
        os.environ.clear()
    os.environ.update(claim.env)
    if "tempfile" in sys.modules:  # already loaded: only its cached folder is reset
        import tempfile  # noqa: PLC0415

        tempfile.tempdir = None
    # Nothing more is read from the parent: stdin becomes /dev/null, not a closed fd 0, which the
    # next file opened would take (nvcc's host compiler then wrote its output into a closed or
    # wrong descriptor: "when writing output to : Bad file descriptor").
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    key = bytes.fromhex(claim.key) if claim.key else b""
    try:
        if setup_error:
            raise OSError(setup_error)
        _lock_job(spawn, claim, bool(settings_file), iso)
        os.chdir(claim.workdir)  # a spare still sits in its placeholder folder
    except OSError as exc:  # a layer we asked for could not be applied: fail closed
        failed = {"status": "infra", "error": f"sandbox setup: {exc}", "isolation": iso.to_dict()}
        _send(fd, key, claim.nonce, failed, reporter)
        sys.exit(3)
    iso.prestarted = spawn.warm
    from harness import phases  # noqa: PLC0415  (imports torch: only after the lock-down)

    isolation = iso.to_dict()
    try:
        result = phases.run(claim.phase, claim.job, isolation)
        _send(
            fd,
            key,
            claim.nonce,
            {"status": "ok", "result": result, "isolation": isolation},
            reporter,
        )
    except BaseException:  # noqa: BLE001  (report the harness's own failure, then exit)
        _send(
            fd,
            key,
            claim.nonce,
            {"status": "infra", "error": traceback.format_exc()[-4000:]},
            reporter,
        )
        sys.exit(3)
    sys.stdout.flush()
    os._exit(0)  # skip interpreter teardown: candidate atexit hooks and threads don't run
