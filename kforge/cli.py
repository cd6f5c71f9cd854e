"""kforge: submit jobs to KernelForge, follow them, download the winning kernels.

    kforge submit shapes.yaml --team my-team --budget 30m --wait
    kforge status JOB [--wait] [--json]
    kforge cancel JOB
    kforge download JOB -o out.zip

The server and token come from --url/--token or KFORGE_URL/KFORGE_TOKEN (create a token on the
site's "API tokens" page, which also lists your teams' slugs for --team). Options such as -q
work before or after the command.
"""

from __future__ import annotations

import argparse
import enum
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from kforge import __version__
from kforge.budget import parse_minutes
from kforge.client import ApiError, Client, Unreachable
from kforge.progress import Progress

MODEL_SUFFIXES = (".pt", ".pth", ".py", ".safetensors", ".onnx")
SHAPE_FORMATS = {".csv": "csv", ".json": "json", ".yaml": "yaml", ".yml": "yaml"}
RECONNECT_TRIES = 10
DEFAULT_URL = "http://127.0.0.1:8000"


class ExitCode(enum.IntEnum):
    """What each means: EXIT_MEANING (printed by --help)."""

    OK = 0
    JOB_FAILED = 1
    USAGE = 2  # argparse uses 2 as well
    JOB_CANCELLED = 3
    API_ERROR = 4  # auth, validation, quota, not found, no winners...
    UNREACHABLE = 5


FINAL_EXIT = {
    "done": ExitCode.OK,
    "failed": ExitCode.JOB_FAILED,
    "cancelled": ExitCode.JOB_CANCELLED,
}


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    token = args.token or os.environ.get("KFORGE_TOKEN", "")
    if not token:
        _say("kforge: no token; pass --token or set KFORGE_TOKEN (create one at /settings/tokens/)")
        return ExitCode.USAGE
    client = Client(args.url, token, timeout_s=args.timeout)
    try:
        return int(args.run(client, args))
    except ApiError as error:
        _say(f"kforge: {error.code}: {error.message}")
        for detail in error.details[1:]:
            if isinstance(detail, dict) and "message" in detail:
                _say(f"  {detail.get('field') or ''}: {detail['message']}")
        return ExitCode.API_ERROR
    except Unreachable as error:
        _say(f"kforge: {error}")
        return ExitCode.UNREACHABLE
    except KeyboardInterrupt:
        _say("kforge: interrupted (the job keeps running; `kforge cancel` stops it)")
        return 130


def _exit_codes() -> str:
    return "exit codes:\n" + "\n".join(f"  {code.value}  {EXIT_MEANING[code]}" for code in ExitCode)


EXIT_MEANING = {
    ExitCode.OK: "done (or the command succeeded)",
    ExitCode.JOB_FAILED: "the job failed",
    ExitCode.USAGE: "bad arguments",
    ExitCode.JOB_CANCELLED: "the job was cancelled",
    ExitCode.API_ERROR: "the server refused (its error code is printed)",
    ExitCode.UNREACHABLE: "the server could not be reached",
}


def _common_options() -> argparse.ArgumentParser:
    """Options every command takes, before or after its name: `kforge -q status J` and
    `kforge status J -q` are the same (SUPPRESS: a later parser keeps an earlier value). A new
    parser per use: parents share their action objects, and set_defaults would change them."""
    common = argparse.ArgumentParser(add_help=False)
    # No %(default)s in these helps: SUPPRESS leaves argparse no default to print there, and
    # `kforge <command> --help` died with KeyError: 'default' (issue 27).
    common.add_argument(
        "--url", default=argparse.SUPPRESS, help=f"server (default: $KFORGE_URL or {DEFAULT_URL})"
    )
    common.add_argument("--token", default=argparse.SUPPRESS, help="API token ($KFORGE_TOKEN)")
    common.add_argument(
        "--timeout", type=float, default=argparse.SUPPRESS, help="seconds per request (60)"
    )
    common.add_argument(
        "-q", "--quiet", action="store_true", default=argparse.SUPPRESS, help="no progress bar"
    )
    return common


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kforge",
        description=__doc__.strip(),
        epilog=_exit_codes(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[_common_options()],
    )
    parser.add_argument("--version", action="version", version=f"kforge {__version__}")
    parser.set_defaults(
        url=os.environ.get("KFORGE_URL", DEFAULT_URL),
        token=None,
        timeout=60.0,
        quiet=False,
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    submit = commands.add_parser(
        "submit",
        help="submit a shape set (.csv/.json/.yaml) or a model file",
        parents=[_common_options()],
    )
    submit.add_argument(
        "file", type=Path, help="shape set or model file ('-' reads shapes from stdin)"
    )
    submit.add_argument(
        "--team", required=True, help="team slug (listed on the site's API tokens page)"
    )
    submit.add_argument("--title", help="job title (default: the file name)")
    submit.add_argument("--queue", help="worker queue (default: the server's first)")
    submit.add_argument("--budget", type=_budget, help="GPU budget, e.g. 30m or 2h")
    submit.add_argument("--wait", action="store_true", help="follow the job until it ends")
    submit.set_defaults(run=cmd_submit)

    status = commands.add_parser("status", help="show a job", parents=[_common_options()])
    status.add_argument("job")
    status.add_argument("--wait", action="store_true", help="follow the job until it ends")
    status.add_argument("--json", action="store_true", help="print the job as JSON")
    status.set_defaults(run=cmd_status)

    cancel = commands.add_parser("cancel", help="cancel a job", parents=[_common_options()])
    cancel.add_argument("job")
    cancel.set_defaults(run=cmd_cancel)

    download = commands.add_parser(
        "download", help="download a job's winning kernels (zip)", parents=[_common_options()]
    )
    download.add_argument("job")
    download.add_argument(
        "-o", "--output", type=Path, help="zip path (default kernelforge-JOB.zip)"
    )
    download.set_defaults(run=cmd_download)
    return parser


def _budget(text: str) -> int:
    try:
        return parse_minutes(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


# --- commands ------------------------------------------------------------------------------


def cmd_submit(client: Client, args: argparse.Namespace) -> int:
    path: Path = args.file
    title = args.title or (path.name if str(path) != "-" else None)
    if path.suffix.lower() in MODEL_SUFFIXES:
        job = client.submit_model(team=args.team, path=path, title=title, gpu_minutes=args.budget)
    else:
        try:
            text = sys.stdin.read() if str(path) == "-" else path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            _say(f"kforge: cannot read {path}: {error}")
            return ExitCode.USAGE
        job = client.submit_shapes(
            team=args.team,
            shapes=text,
            fmt=SHAPE_FORMATS.get(path.suffix.lower(), "auto"),
            title=title,
            queue=args.queue,
            gpu_minutes=args.budget,
        )
    print(job["id"])  # stdout carries only the id, for scripts: JOB=$(kforge submit ...)
    _say(f"job {job['id']} {job['status']}: {len(job['problems'])} problems, {job['web_url']}")
    if not args.wait:
        return ExitCode.OK
    return _wait(client, job, quiet=args.quiet)


def cmd_status(client: Client, args: argparse.Namespace) -> int:
    job = client.job(args.job)
    if args.wait and not job["terminal"]:
        return _wait(client, job, quiet=args.quiet)
    if args.json:
        print(json.dumps(job, indent=2))
    else:
        _print_job(job)
    return FINAL_EXIT.get(job["status"], ExitCode.OK) if job["terminal"] else ExitCode.OK


def cmd_cancel(client: Client, args: argparse.Namespace) -> int:
    job = client.cancel(args.job)
    _say(f"job {job['id']} {job['status']} (cancel requested)")
    return ExitCode.OK


def cmd_download(client: Client, args: argparse.Namespace) -> int:
    data = client.download(args.job)
    output: Path = args.output or Path(f"kernelforge-{args.job}.zip")
    output.write_bytes(data)
    _say(f"wrote {output} ({len(data)} bytes)")
    return ExitCode.OK


# --- waiting -------------------------------------------------------------------------------


def _wait(client: Client, job: dict[str, Any], *, quiet: bool) -> int:
    """Follow the event stream to the end, reconnecting from the last seq if it drops."""
    progress = Progress(
        title=job["title"],
        problems=len(job.get("problems") or []),
        budget_minutes=job.get("gpu_minutes"),
        quiet=quiet,
    )
    after, failures = 0, 0
    try:
        while True:
            try:
                for event in client.events(job["id"], after=after):
                    failures = 0
                    if event.event == "iteration":
                        after = int(event.id or after)
                        progress.on_iteration(event.data)
                    elif event.event == "status":
                        progress.on_status(event.data)
                    elif event.event == "end":
                        return _finish(client, job["id"], progress)
                # The stream closed without "end" (the server's max duration): resume.
            except Unreachable as error:
                failures += 1
                if failures > RECONNECT_TRIES:
                    raise
                _say(f"kforge: stream lost ({error}); reconnecting")
                time.sleep(min(2**failures, 30))
    finally:
        progress.close()


def _finish(client: Client, job_id: str, progress: Progress) -> int:
    job = client.job(job_id)
    progress.finish(job["status"])
    progress.close()
    _print_job(job, interpreter_tasks=progress.interpreter_tasks)
    return FINAL_EXIT.get(job["status"], ExitCode.JOB_FAILED)


def _print_job(
    job: dict[str, Any], interpreter_tasks: frozenset[int] | set[int] = frozenset()
) -> None:
    _say(f"job {job['id']} ({job['title']}, team {job['team']}): {job['status']}")
    for task in job.get("tasks", []):
        best = f"{task['best_speedup']:.2f}x" if task.get("best_speedup") is not None else "-"
        if task.get("id") in interpreter_tasks:
            best = "interp. (CPU interpreter timings check correctness, not speed)"
        line = f"  {task['problem']:<32} {task['status']:<10} {task['iterations']:>4} iterations, best {best}"
        if task.get("queue_position") is not None:  # why it waits, and for how long at most
            ahead, wait = task["queue_position"], task.get("wait_estimate_s") or 0
            line += f"\n    {ahead} task{'' if ahead == 1 else 's'} ahead on {task['queue']}" + (
                f", starts within about {max(1, round(wait / 60))} min" if ahead else ""
            )
        if task.get("error"):
            line += f"\n    error: {task['error'].strip().splitlines()[-1][:200]}"
        _say(line)
    failure = job.get("failure")
    if failure:  # a model job that failed has no task to show it: say why here
        stage = f" ({failure['stage']})" if failure.get("stage") else ""
        _say(f"  failed{stage}: {failure['message']}")
        if failure.get("traceback"):
            _say("    " + failure["traceback"].replace("\n", "\n    "))


def _say(text: str) -> None:
    print(text, file=sys.stderr)
