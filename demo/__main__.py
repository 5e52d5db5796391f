"""``python3 -m demo``: run the demo (``bash demo/run.sh`` installs and builds first, then runs this).

    python3 -m demo [--plain] [--timeout SECONDS] [--keep] [--work-dir DIR]

Exit codes: 0 the demo showed at least one on-demand node emptied onto spot with no pod lost; 1 it did not
(or something failed: the logs are kept and their directory printed); 2 the control plane is not built;
130 interrupted.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from demo.scenario import DEFAULT_TIMEOUT, Demo, Options


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m demo",
        description="spotshift on a local Kubernetes control plane: on-demand nodes emptied onto spot, live.",
    )
    parser.add_argument(
        "--plain",
        action="store_true",
        help="one line per event, no colours or screen redraws (default when stdout is not a terminal)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        metavar="SECONDS",
        help=f"give up (and tear down) after this long (default {DEFAULT_TIMEOUT:.0f})",
    )
    parser.add_argument("--keep", action="store_true", help="keep logs, certificates and kubeconfig afterwards")
    parser.add_argument("--work-dir", type=Path, metavar="DIR", help="where to put them (default: a temporary dir)")
    args = parser.parse_args(argv)
    plain = args.plain or not sys.stdout.isatty() or os.environ.get("TERM") == "dumb"
    return Demo(Options(plain=plain, timeout=args.timeout, keep=args.keep, work_dir=args.work_dir)).run()


if __name__ == "__main__":
    sys.exit(main())
