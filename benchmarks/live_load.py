"""Live events and pages under load, through `manage.py up` on this machine (issue 28).

    python -m benchmarks.live_load --out benchmarks/results/live_load_cpu.json [--root DIR]

Starts the product as a person does (`manage.py up` from --root, default this checkout: SQLite
and a private Redis in a fresh folder, the stand-in agent emitting --events iterations per task
--pace seconds apart), talks to it only over loopback HTTP and websockets, and measures:

- latency: one SSE and one websocket client follow a one-task job; per event written after
  the client connected (backfilled ones are not counted), the time from the iteration's row
  (its `at`) to the client receiving it, p50/p95/max;
- load: --sse SSE and --ws websocket clients follow one job while pages are requested at
  --rate per second (open loop); event latency per transport, page latency and errors, and
  whether every client got every event once and in order;
- idle: page latency at --rate with no streams, then with --idle SSE streams open on a queued
  job whose clients never read past the status line (and how many of them were refused);
- restart: one SSE client (reconnecting with Last-Event-ID) follows a job while the web process
  is sent SIGTERM and, later, SIGKILL; whether `up` survives, how long until the web answers
  again, whether the job finishes, whether the client saw every event once;
- stop: Ctrl-C (SIGINT) to `up` while a task runs: `up`'s exit code and what became of the task.

Bounded: at most --deadline seconds overall, at most 1,000 clients, loopback only. The stream
caps are raised for the run (KF_API_SSE_MAX_PER_TOKEN/PER_IP) so that the idle streams are
really open; the README gives the product's defaults.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import platform
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import websockets

ROOT = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"  # loopback only
MAX_CLIENTS = 1000

CREDENTIALS = """
import json
from django.contrib.auth.models import User
from django.test import Client
from webapp.api import services
user = User.objects.get(username="demo")
raw = services.token_create(user=user, name="live-load")[1]
browser = Client()
browser.force_login(user)
print("KF-CRED " + json.dumps({"token": raw, "session": browser.cookies["sessionid"].value}))
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def stats_ms(values: list[float]) -> dict[str, Any]:
    """p50/p95/max in milliseconds of seconds `values`."""
    if not values:
        return {"n": 0}
    ordered = sorted(values)

    def pct(p: float) -> float:
        return round(1000 * ordered[min(len(ordered) - 1, int(p * len(ordered)))], 1)

    return {"n": len(ordered), "p50_ms": pct(0.50), "p95_ms": pct(0.95), "max_ms": pct(1.0)}


# --- the product, started as `make up` does ---------------------------------------------------


class Up:
    def __init__(self, root: Path, var: Path, *, events: int, pace: float) -> None:
        self.root, self.var = root, var
        self.port = free_port()
        self.url = f"http://{HOST}:{self.port}"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("KF_", "DJANGO"))}
        self.env.update(
            DJANGO_SETTINGS_MODULE="webapp.settings",
            KF_VAR_DIR=str(var),
            REDIS_URL=f"redis://{HOST}:{free_port()}/0",  # nothing there: `up` starts its own
            KF_CHANNELS_PREFIX="kf-live-load",
            KF_AGENT="standin",
            KF_STANDIN_ITERATIONS=str(events),
            KF_STANDIN_PAUSE_S=str(pace),
            KF_TEAM_MAX_ACTIVE_JOBS="100",
            KF_API_SSE_MAX_PER_TOKEN=str(MAX_CLIENTS),
            KF_API_SSE_MAX_PER_IP=str(MAX_CLIENTS),
            PYTHONUNBUFFERED="1",
        )
        self.env.pop("DATABASE_URL", None)
        self.log_path = var.parent / "up.log"
        self.process: subprocess.Popen | None = None

    def start(self, timeout_s: float = 120) -> None:
        self.var.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [sys.executable, "manage.py", "up", "--port", str(self.port)],
            cwd=self.root, env=self.env, stdout=self.log_path.open("wb"),
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + timeout_s
        while "KernelForge is up" not in self.log():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"`up` did not start:\n{self.log()[-3000:]}")
            time.sleep(0.3)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def web_pid(self) -> int:
        """The web server's pid, as `up` last reported starting it."""
        found = re.findall(r"started web \(pid (\d+)\)", self.log())
        if not found:
            raise RuntimeError("no web pid in up's log")
        return int(found[-1])

    def credentials(self) -> dict[str, str]:
        out = subprocess.run(
            [sys.executable, "manage.py", "shell", "-c", CREDENTIALS],
            cwd=self.root, env=self.env, capture_output=True, text=True, timeout=120, check=True,
        ).stdout  # fmt: skip
        return json.loads(out.split("KF-CRED ", 1)[1])

    def db(self, sql: str, *args: Any) -> list[tuple]:
        """Read the product's SQLite database directly (works while the web server is down)."""
        with contextlib.closing(sqlite3.connect(f"file:{self.var}/kernelforge.sqlite3?mode=ro",
                                                uri=True, timeout=30)) as conn:  # fmt: skip
            return conn.execute(sql, args).fetchall()

    def job_status(self, job_id: str) -> str:
        rows = self.db("SELECT status FROM jobs_job WHERE id = ?", job_id.replace("-", ""))
        return rows[0][0] if rows else "missing"

    def stop(self, timeout_s: float = 120) -> dict[str, Any]:
        """Ctrl-C as a terminal sends it; `up`'s exit code and how long it took."""
        if not self.alive():
            return {"exit_code": self.process.returncode if self.process else None}
        assert self.process is not None
        started = time.monotonic()
        self.process.send_signal(signal.SIGINT)
        try:
            code = self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            code = self.process.wait()
        return {"exit_code": code, "stop_s": round(time.monotonic() - started, 1)}

    def kill(self) -> None:
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)


def web_threads(pid: int) -> int | None:
    """The web server process's thread count."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Threads:"):
                return int(line.split()[1])
    return None


# --- clients ----------------------------------------------------------------------------------


@dataclass
class Follower:
    """What one streaming client saw: (seq, received at, written at) per iteration event."""

    events: list[tuple[int, float, float]] = field(default_factory=list)
    refused: int | None = None  # the HTTP status of a refused stream
    reconnects: int = 0
    error: str = ""
    connected_at: float | None = None  # when the stream's first message arrived

    def pushed(self) -> list[tuple[int, float, float]]:
        """The events written after this client was connected: pushed, not backfilled."""
        since = self.connected_at if self.connected_at is not None else float("inf")
        return [event for event in self.events if event[2] >= since]

    def latencies(self) -> list[float]:
        return [received - at for _, received, at in self.pushed()]

    def complete(self, last_seq: int) -> bool:
        """Every event once, in order."""
        return [seq for seq, _, _ in self.events] == list(range(1, last_seq + 1))


def _at(payload: dict[str, Any]) -> float:
    return datetime.fromisoformat(payload["at"]).timestamp()


async def follow_sse(client: httpx.AsyncClient, url: str, job: str, out: Follower, *,
                     reconnect: bool = False, until: float) -> None:  # fmt: skip
    last = 0
    while time.monotonic() < until:
        headers = {"Accept": "text/event-stream", "Last-Event-ID": str(last)}
        try:
            async with client.stream("GET", f"{url}/api/v1/jobs/{job}/events", headers=headers,
                                     timeout=httpx.Timeout(10, read=60)) as response:  # fmt: skip
                if response.status_code != 200:
                    out.refused = response.status_code
                    return
                event = ""
                async for line in response.aiter_lines():
                    if out.connected_at is None:
                        out.connected_at = time.time()
                    if line.startswith("event: "):
                        event = line[7:]
                    elif line.startswith("data: ") and event == "iteration":
                        data = json.loads(line[6:])
                        out.events.append((data["seq"], time.time(), _at(data)))
                        last = data["seq"]
                    elif line.startswith("data: ") and event == "end":
                        return
        except (httpx.HTTPError, OSError) as error:
            if not reconnect:
                out.error = repr(error)
                return
        out.reconnects += 1
        await asyncio.sleep(0.2)


async def follow_ws(url: str, job: str, session: str, out: Follower, *, until: float) -> None:
    ws_url = url.replace("http://", "ws://") + f"/ws/jobs/{job}/"
    seen = 0
    try:
        async with websockets.connect(
            ws_url, additional_headers={"Cookie": f"sessionid={session}"}, origin=url,
            open_timeout=30, max_size=None,
        ) as ws:  # fmt: skip
            while time.monotonic() < until:
                message = json.loads(await asyncio.wait_for(ws.recv(), timeout=60))
                received = time.time()
                if out.connected_at is None:
                    out.connected_at = received
                if message["type"] == "iteration":
                    rows = [message["iteration"]]
                elif message["type"] == "backfill":
                    rows = message["iterations"]
                else:
                    status = message["status"]
                    if status["terminal"] and seen >= status["last_seq"]:
                        return
                    continue
                for row in rows:
                    if row["seq"] > seen:  # the page drops duplicates by seq too
                        out.events.append((row["seq"], received, _at(row)))
                        seen = row["seq"]
    except Exception as error:  # noqa: BLE001 (recorded, not raised: one client of many)
        out.error = repr(error)


async def idle_stream(url: str, job: str, token: str) -> tuple[int | None, asyncio.StreamWriter]:
    """An SSE request whose client reads the status line and then never reads again."""
    reader, writer = await asyncio.open_connection(HOST, int(url.rsplit(":", 1)[1]))
    writer.write(
        f"GET /api/v1/jobs/{job}/events HTTP/1.1\r\nHost: {HOST}\r\n"
        f"Authorization: Bearer {token}\r\nAccept: text/event-stream\r\n\r\n".encode()
    )
    await writer.drain()
    try:
        line = await asyncio.wait_for(reader.readline(), timeout=30)
        return int(line.split()[1]), writer
    except (TimeoutError, IndexError, ValueError):
        return None, writer


async def probe_pages(client: httpx.AsyncClient, url: str, paths: list[str], *, rate: float,
                      count: int) -> dict[str, Any]:  # fmt: skip
    """`count` page requests at `rate` per second, open loop (a slow answer delays no other)."""
    latencies: list[float] = []
    errors: list[str] = []

    async def one(path: str) -> None:
        started = time.monotonic()
        try:
            response = await client.get(url + path, timeout=30)
            if response.status_code != 200:
                errors.append(f"{path}: {response.status_code}")
        except httpx.HTTPError as error:
            errors.append(f"{path}: {error!r}")
        latencies.append(time.monotonic() - started)

    tasks = []
    start = time.monotonic()
    for i, path in zip(range(count), itertools.cycle(paths), strict=False):
        await asyncio.sleep(max(0.0, start + i / rate - time.monotonic()))
        tasks.append(asyncio.create_task(one(path)))
    await asyncio.gather(*tasks)
    result = stats_ms(latencies)
    result.update(
        over_1s=sum(v > 1 for v in latencies), errors=len(errors), error_sample=errors[:3]
    )
    return result


# --- scenarios --------------------------------------------------------------------------------


class Bench:
    def __init__(self, up: Up, args: argparse.Namespace, creds: dict[str, str]) -> None:
        self.up, self.args = up, args
        self.token, self.session = creds["token"], creds["session"]
        self.api = httpx.AsyncClient(
            headers={"Authorization": f"Bearer {self.token}"},
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=None),
        )
        self.browser = httpx.AsyncClient(
            cookies={"sessionid": self.session},
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=None),
        )
        self.jobs = itertools.count(1)

    async def submit(self, problems: int = 1) -> str:
        n = next(self.jobs)
        shapes = "op,shape,dtype\n" + "".join(f"rmsnorm,{n}x{64 * (i + 1)},fp32\n"
                                              for i in range(problems))  # fmt: skip
        body = {"team": "demo-team", "shapes": shapes, "format": "csv", "queue": "cpu",
                "gpu_minutes": 2 * problems, "title": f"live-load {n}"}  # fmt: skip
        response = await self.api.post(f"{self.up.url}/api/v1/jobs", json=body, timeout=60)
        response.raise_for_status()
        return response.json()["id"]

    async def cancel(self, job: str) -> None:
        with contextlib.suppress(httpx.HTTPError):
            await self.api.post(f"{self.up.url}/api/v1/jobs/{job}/cancel", timeout=30)

    async def wait_done(self, job: str, timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            status = self.up.job_status(job)
            if status in ("done", "failed", "cancelled"):
                return status
            await asyncio.sleep(0.5)
        return self.up.job_status(job)

    def pages(self, job: str) -> list[str]:
        return ["/", f"/jobs/{job}/", "/leaderboards/"]

    def summary(self, followers: list[Follower], last_seq: int) -> dict[str, Any]:
        by_second: dict[int, list[float]] = {}
        first = min((at for f in followers for _, _, at in f.pushed()), default=0.0)
        for f in followers:
            for _, received, at in f.pushed():
                by_second.setdefault(int(at - first), []).append(received - at)
        return {
            "clients": len(followers),
            "latency": stats_ms([v for f in followers for v in f.latencies()]),
            # p95 per second of the job: a stall shows as a run of slow seconds
            "p95_ms_by_second": [stats_ms(by_second[k]).get("p95_ms") for k in sorted(by_second)],
            "complete_in_order": sum(f.complete(last_seq) for f in followers),
            "refused": sum(f.refused is not None for f in followers),
            "errors": [f.error for f in followers if f.error][:3],
        }

    async def follow(self, job: str, *, sse: int, ws: int, with_pages: bool) -> dict[str, Any]:
        until = time.monotonic() + self.args.job_timeout
        sse_f = [Follower() for _ in range(sse)]
        ws_f = [Follower() for _ in range(ws)]
        streams = [follow_sse(self.api, self.up.url, job, f, until=until) for f in sse_f]
        streams += [follow_ws(self.up.url, job, self.session, f, until=until) for f in ws_f]
        running = asyncio.gather(*streams)
        pages = None
        if with_pages:
            count = int(self.args.rate * self.args.events * self.args.pace)
            pages = await probe_pages(self.browser, self.up.url, self.pages(job),
                                      rate=self.args.rate, count=count)  # fmt: skip
        await running
        status = await self.wait_done(job, 30)
        return {"job_status": status, "events": self.args.events, "pages": pages,
                "sse": self.summary(sse_f, self.args.events),
                "websocket": self.summary(ws_f, self.args.events)}  # fmt: skip

    async def latency(self) -> dict[str, Any]:
        return await self.follow(await self.submit(), sse=1, ws=1, with_pages=False)

    async def load(self) -> dict[str, Any]:
        job = await self.submit()
        return await self.follow(job, sse=self.args.sse, ws=self.args.ws, with_pages=True)

    async def idle(self) -> dict[str, Any]:
        busy = await self.submit(problems=3)  # holds the one CPU worker
        queued = await self.submit()  # waits behind it: its streams carry no events
        probes = int(self.args.rate * 4)
        pages = self.pages(busy)
        unloaded = await probe_pages(self.browser, self.up.url, pages, rate=self.args.rate,
                                     count=probes)  # fmt: skip
        threads_before = web_threads(self.up.web_pid())
        opened = await asyncio.gather(
            *(idle_stream(self.up.url, queued, self.token) for _ in range(self.args.idle))
        )
        statuses = [code for code, _ in opened]
        await asyncio.sleep(2)
        threads_open = web_threads(self.up.web_pid())
        loaded = await probe_pages(self.browser, self.up.url, pages, rate=self.args.rate,
                                   count=probes)  # fmt: skip
        for _, writer in opened:
            writer.close()
        await asyncio.sleep(2)
        after = await probe_pages(self.browser, self.up.url, pages, rate=self.args.rate,
                                  count=probes)  # fmt: skip
        for job in (busy, queued):
            await self.cancel(job)
        await self.wait_done(busy, 60)
        return {
            "idle_streams": len(opened),
            "stream_statuses": {str(c): statuses.count(c) for c in sorted(set(statuses), key=str)},
            "web_threads": {"without_streams": threads_before, "with_idle_streams": threads_open},
            "pages_without_streams": unloaded,
            "pages_with_idle_streams": loaded,
            "pages_after_closing": after,
        }

    async def restart(self, sig: signal.Signals) -> dict[str, Any]:
        job = await self.submit()
        follower = Follower()
        until = time.monotonic() + self.args.job_timeout
        following = asyncio.create_task(
            follow_sse(self.api, self.up.url, job, follower, reconnect=True, until=until)
        )
        await asyncio.sleep(3)
        pid = self.up.web_pid()
        os.kill(pid, sig)
        killed = time.monotonic()
        back_s = None
        while time.monotonic() - killed < 90 and self.up.alive():
            with contextlib.suppress(httpx.HTTPError):
                if self.up.web_pid() != pid:
                    response = await self.browser.get(f"{self.up.url}/login/", timeout=5)
                    if response.status_code == 200:
                        back_s = round(time.monotonic() - killed, 2)
                        break
            await asyncio.sleep(0.2)
        status = await self.wait_done(job, self.args.job_timeout) if self.up.alive() else None
        if back_s is None:
            following.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await following
        exits = re.findall(r"web exited with code (-?\d+)", self.up.log())
        return {
            "signal": sig.name,
            "up_survived": self.up.alive(),
            "web_exit_code": int(exits[-1]) if exits else None,
            "web_back_after_s": back_s,
            "job_status": status or self.up.job_status(job),
            "sse_reconnects": follower.reconnects,
            "sse_complete_in_order": follower.complete(self.args.events),
            "sse_events": len(follower.events),
        }

    async def stop(self) -> dict[str, Any]:
        job = await self.submit()
        await asyncio.sleep(3)
        result = await asyncio.to_thread(self.up.stop)
        rows = self.up.db(
            "SELECT status, attempt, stop_reason FROM jobs_task WHERE job_id = ?",
            job.replace("-", ""),
        )
        result["task_after_stop"] = [dict(zip(("status", "attempt", "stop_reason"), r, strict=True))
                                     for r in rows]  # fmt: skip
        return result


def versions(root: Path) -> dict[str, str]:
    import importlib.metadata as md

    found = {"python": platform.python_version()}
    for name in ("django", "channels", "channels-redis", "daphne", "twisted", "celery"):
        with contextlib.suppress(md.PackageNotFoundError):
            found[name] = md.version(name)
    with contextlib.suppress(subprocess.CalledProcessError, FileNotFoundError):
        found["checkout"] = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
    return found


async def run(args: argparse.Namespace, up: Up) -> dict[str, Any]:
    bench = Bench(up, args, up.credentials())
    scenarios: dict[str, Any] = {}
    for name, step in (
        ("latency", bench.latency),
        ("load", bench.load),
        ("idle", bench.idle),
        ("restart_sigterm", lambda: bench.restart(signal.SIGTERM)),
        ("restart_sigkill", lambda: bench.restart(signal.SIGKILL)),
        ("stop", bench.stop),
    ):
        if args.only and name not in args.only:
            continue
        if not up.alive():
            scenarios[name] = {"skipped": "`up` is no longer running"}
            continue
        print(f"[live_load] {name}...", file=sys.stderr, flush=True)
        started, load = time.monotonic(), os.getloadavg()[0]
        scenarios[name] = await step()
        scenarios[name]["wall_s"] = round(time.monotonic() - started, 1)
        # The machine is shared: how busy it was says how far to trust the numbers.
        scenarios[name]["load_avg_1min"] = {"before": load, "after": os.getloadavg()[0]}
        print(f"[live_load] {name}: {json.dumps(scenarios[name])[:600]}", file=sys.stderr)
    return scenarios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout to run `up` from")
    parser.add_argument("--label", default="", help="what was measured, e.g. 'main' or 'issue-28'")
    parser.add_argument("--events", type=int, default=150, help="iterations per task")
    parser.add_argument("--pace", type=float, default=0.1, help="seconds between iterations")
    parser.add_argument("--sse", type=int, default=50)
    parser.add_argument("--ws", type=int, default=20)
    parser.add_argument("--idle", type=int, default=200)
    parser.add_argument("--rate", type=float, default=20.0, help="page requests per second")
    parser.add_argument("--job-timeout", type=float, default=120.0)
    parser.add_argument("--deadline", type=float, default=900.0, help="the whole run, seconds")
    parser.add_argument("--only", nargs="*", default=[], help="run only these scenarios")
    args = parser.parse_args()
    if args.sse + args.ws > MAX_CLIENTS or args.idle > MAX_CLIENTS:
        parser.error(f"at most {MAX_CLIENTS} clients")

    with tempfile.TemporaryDirectory(prefix="kf-live-load-") as tmp:
        up = Up(args.root.resolve(), Path(tmp) / "var", events=args.events, pace=args.pace)
        started = datetime.now(UTC)
        try:
            up.start()
            scenarios = asyncio.run(asyncio.wait_for(run(args, up), timeout=args.deadline))
        finally:
            up.kill()
        # The demo password of this throwaway instance stays out of the record.
        log_tail = re.sub(r"password \S+", "password <redacted>", up.log()[-4000:])
    record = {
        "what": "live events and pages under load through `manage.py up` (issue 28)",
        "label": args.label,
        "date": started.isoformat(timespec="seconds"),
        "command": " ".join(
            [Path(sys.executable).name, "-m", "benchmarks.live_load", *sys.argv[1:]]
        ),
        "machine": {
            "host": platform.node(),
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "load_avg_at_start": os.getloadavg(),
        },  # fmt: skip
        "versions": versions(args.root),
        "settings": {k: v for k, v in vars(args).items() if k not in ("out", "root")},
        "scenarios": scenarios,
        "up_log_tail": log_tail,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1, default=str) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
