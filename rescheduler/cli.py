"""``spot-rescheduler``: the rescheduler's command line.

    spot-rescheduler plan [--snapshot FILE|-] [--kubeconfig FILE] [--context NAME] [--config FILE]
                          [--output table|json|html] [--verify] [--time-budget SECONDS] [--workers N]
                          [--progress auto|always|never]
                          [--spot-node-label SELECTOR] [--on-demand-node-label SELECTOR]
                          [--delete-non-replicated-pods [BOOL]]
                          [--kubernetes-version VERSION] [--spot-reclaims FILE] [FILE]

``plan`` prints what would move, from a snapshot file (``kubectl get nodes,pods,pdb,pv,pvc,storageclass -A -o
json``, the objects the run loop watches; add ``namespaces`` for namespace selectors) or from the cluster of
the kubeconfig (or the in-cluster service account). Nothing is changed in the cluster. ``--output html FILE`` writes a
self-contained page that draws every node's CPU and memory before and after the plan
(:mod:`rescheduler.output.page`); any output goes to ``FILE`` instead of stdout when one is given. The node-label
and ``--delete-non-replicated-pods`` flags are ``run``'s (:mod:`rescheduler.flags`), so a preview made with the
same flags plans alike.
``--kubernetes-version`` names the release whose kube-scheduler rules to plan with (:mod:`shared.switches`);
without it a snapshot is planned with the current rules and a live cluster with its API server's version.
``plan`` has no memory of spot reclaims (every spot pool is alike, :mod:`shared.spot_pools`) unless
``--spot-reclaims FILE`` gives one: the value of the run loop's Lease annotation ``spotshift.io/spot-reclaims``,
read at ``--now``.

Subcommands are registered in :data:`COMMANDS` (name → (add arguments, run)); the long-running ``run`` loop
adds itself there. Exit codes: 0 success, 2 unusable input or configuration (one line on stderr, no
traceback), 130 interrupted.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import IO

from rescheduler.cluster.listing import load_cluster
from rescheduler.decode.reader import Progress, SnapshotError, load_snapshot
from rescheduler.flags import add_plan_config_arguments, config_from_args
from rescheduler.output.document import render_json
from rescheduler.output.table import render_table
from rescheduler.parallel.packing import default_workers, passes
from rescheduler.plan.capacity_needs import CapacityNeed, capacity_needs
from rescheduler.plan.planner import Plan, plan
from rescheduler.run import add_run_arguments, run_command
from shared.config import Config, ConfigError
from shared.snapshot import ClusterSnapshot
from shared.spot_pools import ReclaimMemory
from shared.switches import CURRENT, STRICTEST, Switches, for_version, parse_version

__all__ = ["main", "build_parser", "COMMANDS", "UsageError"]

PROG = "spot-rescheduler"


class UsageError(Exception):
    """Input or configuration the command cannot use; printed as one line, exit code 2."""


# --- plan ------------------------------------------------------------------------------------------------


def _add_plan_arguments(p: argparse.ArgumentParser) -> None:
    """Adds ``plan``'s flags, in the order ``--help`` lists them."""
    _add_input_output_arguments(p)
    _add_planning_arguments(p)
    add_plan_config_arguments(p)


def _add_input_output_arguments(p: argparse.ArgumentParser) -> None:
    """Adds where the cluster and the configuration are read from, and the output's format and file."""
    source = p.add_mutually_exclusive_group()
    source.add_argument(
        "--snapshot",
        metavar="FILE",
        help="read the cluster from FILE (kubectl get nodes,pods,pdb,pv,pvc,storageclass -A -o json), '-' for stdin; "
        "default: the live cluster",
    )
    source.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="kubeconfig of the live cluster (default: $KUBECONFIG, ~/.kube/config, in-cluster)",
    )
    p.add_argument("--context", metavar="NAME", help="kubeconfig context")
    p.add_argument(
        "--config",
        metavar="FILE",
        help="spotshift configuration (YAML); default: $SPOTSHIFT_CONFIG or built-in defaults",
    )
    p.add_argument(
        "--output",
        "-o",
        choices=("table", "json", "html"),
        default="table",
        help="table for people (default), json for programs, html for a picture of the plan (a page with no "
        "network assets)",
    )
    p.add_argument("file", nargs="?", metavar="FILE", help="write the output to FILE instead of stdout")


def _add_planning_arguments(p: argparse.ArgumentParser) -> None:
    """Adds how the plan is made: checks, time and process limits, the rules' release, the moment, progress."""
    p.add_argument(
        "--verify",
        action="store_true",
        help="re-check every move with the full scheduler predicates (slow on big clusters)",
    )
    p.add_argument(
        "--time-budget",
        type=float,
        metavar="SECONDS",
        default=None,
        help="try no further packing strategy once planning would take longer than this (the first strategy and "
        "pusher's order always run, so the plan never drains fewer nodes than pusher's; default: no limit)",
    )
    p.add_argument(
        "--workers",
        type=_workers,
        metavar="N",
        default=None,
        help="use up to N processes: a big snapshot file is read by two, a big cluster's packing strategies run "
        "one per process (default: 3 when more than one CPU is usable, else 1; 1 does everything in one); the "
        "plan is the same",
    )
    p.add_argument(
        "--kubernetes-version",
        metavar="VERSION",
        help="plan with the kube-scheduler rules of this release (v1.20.2, 1.27.3-eks-abc; 'unknown': the strictest "
        "rules); default: the live cluster's API server version, or the current rules for a snapshot",
    )
    p.add_argument(
        "--now",
        type=_instant,
        metavar="TIME",
        default=None,
        help="judge the disruption controls (pod and node ages, drain windows and budgets) at TIME, RFC 3339 "
        "(2027-01-15T08:00:00Z), instead of the current time: to replay a saved snapshot's moment",
    )
    p.add_argument(
        "--spot-reclaims",
        metavar="FILE",
        default=None,
        help="plan with this memory of spot reclaims (the rescheduler Lease's spotshift.io/spot-reclaims "
        "annotation), judged at --now; default: none, every spot pool alike",
    )
    p.add_argument(
        "--progress",
        choices=("auto", "always", "never"),
        default="auto",
        help="progress on stderr while a big snapshot loads (auto: when stderr is a terminal)",
    )


def _instant(text: str) -> float:
    """``--now``: an RFC 3339 time with its offset, as seconds since the epoch."""
    try:
        when = datetime.datetime.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an RFC 3339 time (2027-01-15T08:00:00Z)") from None
    if when.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{text!r} has no time zone offset (end it with Z or +01:00)")
    return when.timestamp()


def _reclaims(path: str, config: Config) -> ReclaimMemory:
    """``--spot-reclaims``: the memory of spot reclaims in the file at ``path``."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as e:
        raise UsageError(f"--spot-reclaims {path}: cannot be read ({e.strerror or e})") from None
    try:
        return ReclaimMemory.from_json(text, config.spot.memory, config.spot.stability_window)
    except ValueError as e:
        raise UsageError(f"--spot-reclaims {path}: {e}") from None


def _workers(text: str) -> int:
    """``--workers``: a whole number of processes, at least 1."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of processes") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: at least 1 process")
    return n


def _progress(mode: str, stderr: IO[str]) -> Progress:
    if mode == "always":
        enabled = True
    elif mode == "never":
        enabled = False
    else:
        enabled = stderr.isatty()
    return Progress(stderr, enabled=enabled)


def _load(args: argparse.Namespace, progress: Progress, stdin: IO[bytes] | None, workers: int) -> ClusterSnapshot:
    if args.snapshot is not None:
        return load_snapshot(args.snapshot, progress=progress, stdin=stdin, workers=workers)
    return load_cluster(args.kubeconfig, context=args.context, progress=progress)


def _run_plan(
    args: argparse.Namespace, env: dict[str, str], stdout: IO[str], stderr: IO[str], stdin: IO[bytes] | None
) -> int:
    config: Config = config_from_args(args, env)
    progress = _progress(args.progress, stderr)
    # A one-shot process that builds a few million small acyclic objects: the cyclic garbage collector
    # would only rescan them again and again (bench/plan_scale.py measures the whole command).
    gc.disable()
    switches = _switches_from_flag(args)  # before the load: a bad value fails at once
    workers = args.workers if args.workers is not None else default_workers()
    snapshot = _load(args, progress, stdin, workers)
    if switches is None:  # after the load: an unreachable cluster is one error line, not two
        switches = _discover(args, stderr)
    progress.phase(f"planning {len(snapshot):,} nodes")
    now = time.time() if args.now is None else args.now  # when the disruption controls are judged
    if args.spot_reclaims is not None:
        snapshot.spot_outlook = _reclaims(args.spot_reclaims, config).outlook(now)
    result = plan(
        snapshot,
        config,
        verify=args.verify,
        time_budget=args.time_budget,
        clock=time.monotonic,
        switches=switches,
        now=now,
        passes=passes(workers),
    )
    progress.done()
    needs = capacity_needs(snapshot, result.reasons, config) if config.capacity.enabled else None
    _write(args, _render(args, snapshot, result, config, needs, now), stdout, stderr)
    if getattr(args, "process_exit", False):
        # A whole process just for this command: end it here rather than free millions of objects one by
        # one on the way out. Nothing is left to flush or close.
        stderr.flush()
        os._exit(0)
    return 0


def _render(
    args: argparse.Namespace,
    snapshot: ClusterSnapshot,
    result: Plan,
    config: Config,
    needs: Sequence[CapacityNeed] | None,
    now: float,
) -> str:
    """The plan as ``--output`` asks: JSON (with ``capacity`` in capacity mode), the HTML page, or the table."""
    if args.output == "json":
        return render_json(result, needs)
    if args.output == "html":
        from rescheduler.output.page import render_html

        return render_html(snapshot, result, config, source=_source(args), now=now)
    return render_table(result, needs)


def _write(args: argparse.Namespace, text: str, stdout: IO[str], stderr: IO[str]) -> None:
    """Writes ``text`` to the ``FILE`` argument (saying so on stderr), else to stdout; a file that cannot be
    written is a :class:`UsageError`."""
    if args.file:
        try:
            with open(args.file, "w", encoding="utf-8") as fh:
                fh.write(text)
        except OSError as e:
            raise UsageError(f"cannot write {args.file}: {e.strerror or e}") from None
        stderr.write(f"wrote {args.output} plan to {args.file}\n")
    else:
        stdout.write(text)
    stdout.flush()


def _switches_from_flag(args: argparse.Namespace) -> Switches | None:
    """The kube-scheduler rules to plan with, from ``--kubernetes-version``, else the current rules for a
    snapshot; ``None``: a live cluster, whose ``/version`` says (:func:`_discover`)."""
    text = getattr(args, "kubernetes_version", None)
    if text is not None:
        if text.strip().lower() == "unknown":
            return STRICTEST
        if parse_version(text) is None:
            raise UsageError(
                f"--kubernetes-version {text!r} is not a Kubernetes version (like v1.20.2 or 1.27.3-eks-abc); "
                "'unknown' plans with the strictest rules"
            )
        return for_version(text)
    return CURRENT if args.snapshot is not None else None


def _discover(args: argparse.Namespace, stderr: IO[str]) -> Switches:
    """The live cluster's ``/version``: its release's rules, said on stderr (a warning when not usable)."""
    from rescheduler.cluster import USER_AGENT
    from rescheduler.cluster.rules import planning_sentence
    from shared.kube.api import Kube, KubeconfigError, transport_from_kubeconfig
    from shared.kube.version import read_switches

    try:
        found = read_switches(Kube(transport_from_kubeconfig(args.kubeconfig, args.context, user_agent=USER_AGENT)))
    except KubeconfigError as e:
        raise SnapshotError(f"cluster: {e}") from None
    stderr.write(f"{'warning: ' if found.warning else ''}{planning_sentence(found)}\n")
    return found.switches


def _source(args: argparse.Namespace) -> str:
    """Where the plan's cluster came from, for the page's title."""
    if args.snapshot is not None:
        return "snapshot " + ("<stdin>" if args.snapshot == "-" else os.path.basename(args.snapshot))
    return f"context {args.context}" if args.context else "current kubeconfig context"


# --- entry point -------------------------------------------------------------------------------------------

Runner = Callable[[argparse.Namespace, dict[str, str], IO[str], IO[str], "IO[bytes] | None"], int]
COMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None], Runner]] = {
    "plan": (
        "print which on-demand nodes can be drained onto spot, and where each pod goes",
        _add_plan_arguments,
        _run_plan,
    ),
    "run": (
        "drain on-demand nodes onto spot, every housekeeping interval, safely (leader-elected)",
        add_run_arguments,
        lambda args, env, stdout, stderr, stdin: run_command(args, env=env),
    ),
}
"""Subcommand name → (help, add its arguments, run it)."""


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog, description="spotshift rescheduler: move workloads from on-demand to spot nodes safely."
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (help_text, add_arguments, _) in COMMANDS.items():
        add_arguments(sub.add_parser(name, help=help_text, description=help_text))
    return parser


def main(
    argv: Sequence[str] | None = None,
    *,
    env: dict[str, str] | None = None,
    stdout: IO[str] | None = None,
    stderr: IO[str] | None = None,
    stdin: IO[bytes] | None = None,
    prog: str = PROG,
) -> int:
    """Run the command line; returns the exit code (the ``spot-rescheduler`` script exits with it).

    ``prog`` names the command in usage and error messages (``kubectl spotshift`` for the kubectl plugin).
    """
    out = stdout if stdout is not None else sys.stdout
    err = stderr if stderr is not None else sys.stderr
    args = build_parser(prog).parse_args(argv)
    # Called without arguments means called as the program (console script, python -m); with them, from
    # code that goes on afterwards.
    args.process_exit = argv is None and stdout is None
    _, _, run = COMMANDS[args.command]
    try:
        return run(args, dict(os.environ) if env is None else env, out, err, stdin)
    except (SnapshotError, ConfigError, UsageError) as e:
        err.write(f"{prog}: error: {_one_line(e)}\n")
        return 2
    except KeyboardInterrupt:
        err.write(f"{prog}: interrupted\n")
        return 130
    except BrokenPipeError:
        # The reader went away (| head): not an error of ours. Point stdout at devnull so the
        # interpreter's final flush does not complain again.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 0


def _one_line(e: Exception) -> str:
    text = " ".join(str(e).split())
    return text or type(e).__name__


if __name__ == "__main__":
    sys.exit(main())
