"""``kubectl spotshift``: the kubectl plugin (console script ``kubectl-spotshift``, krew's naming convention).

    kubectl spotshift plan [--context NAME] [--kubeconfig FILE] [--config FILE] [-o table|json|html] [FILE]

kubectl runs any executable named ``kubectl-<name>`` on ``PATH`` for ``kubectl <name> ...`` and passes the
remaining arguments and its environment on, so ``KUBECONFIG`` reaches this process as it would reach kubectl.
kubectl does not pass its own global flags to a plugin (it stops looking for a plugin name at the first flag),
so ``--context`` and ``--kubeconfig`` go after the subcommand: ``kubectl spotshift plan --context prod``.

``plan`` is ``spot-rescheduler plan`` on the live cluster of the current context: it lists the cluster (read
only) and prints which on-demand nodes spotshift would empty onto spot and why the others stay. The plugin
adds no behaviour of its own, so the preview is exactly what the rescheduler would plan.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import IO

from rescheduler import cli

__all__ = ["main", "PROG", "USAGE"]

PROG = "kubectl spotshift"
USAGE = f"""\
usage: {PROG} plan [--context NAME] [--kubeconfig FILE] [--config FILE] [-o table|json|html] [FILE]

Preview what spotshift's rescheduler would do on the cluster of the current kubeconfig context: which
on-demand nodes it would empty onto spot, where each pod would go, and why the other nodes stay.
Nothing in the cluster is changed.

  kubectl spotshift plan                          the current context ($KUBECONFIG or ~/.kube/config)
  kubectl spotshift plan --context prod -o json   another context, as JSON
  kubectl spotshift plan -o html plan.html        a page drawing every node before and after the plan

'{PROG} plan --help' lists every option.
"""


def main(argv: Sequence[str] | None = None, *, stdout: IO[str] | None = None, stderr: IO[str] | None = None) -> int:
    """Run the plugin; returns the exit code (0 success, 2 bad usage or input, as ``spot-rescheduler``)."""
    args = list(sys.argv[1:] if argv is None else argv)
    out = stdout if stdout is not None else sys.stdout
    err = stderr if stderr is not None else sys.stderr
    if not args or args[0] in ("-h", "--help", "help"):
        (out if args else err).write(USAGE)
        return 0 if args else 2
    if args[0] != "plan":
        err.write(f"{PROG}: unknown command {args[0]!r}\n\n{USAGE}")
        return 2
    return cli.main(args, stdout=stdout, stderr=stderr, prog=PROG)


if __name__ == "__main__":
    sys.exit(main())
