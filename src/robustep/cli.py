"""The ``robustep`` command line.

::

    robustep list
    robustep reproduce NAME [NAME ...] | all [--quick | --full] [--out DIR] [--seed N] [--strict]

Exit status: 0 when the command completed — also when some experiments failed
or lacked data (they are listed prominently in the report and on the console);
1 with ``--strict`` if an experiment failed; 2 for a usage error such as an
unknown experiment name; 130 if interrupted (the index then lists what finished).
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from collections.abc import Sequence

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="robustep",
        description="Robust Expectation Propagation: reproduce the papers' experiments.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    sub.add_parser("list", help="list the registered experiments (name, source, claim)")
    rep = sub.add_parser(
        "reproduce",
        help="run experiments and write a report",
        description="Run experiments and write OUT/index.html, OUT/README.md and OUT/NAME/.",
    )
    rep.add_argument("names", nargs="+", metavar="NAME", help="experiment names, or 'all'")
    size = rep.add_mutually_exclusive_group()
    size.add_argument(
        "--quick",
        dest="mode",
        action="store_const",
        const="quick",
        help="small configurations, seconds to a minute each (default)",
    )
    size.add_argument(
        "--full", dest="mode", action="store_const", const="full", help="the papers' sizes"
    )
    rep.set_defaults(mode="quick")
    rep.add_argument(
        "--out", default="report", metavar="DIR", help="report folder (default: report)"
    )
    rep.add_argument("--seed", type=int, default=0, metavar="N", help="random seed (default: 0)")
    rep.add_argument(
        "--strict",
        action="store_true",
        help="exit with status 1 if an experiment failed (lacking data is not a failure)",
    )
    return parser


def _cmd_list() -> int:
    from robustep.experiments import import_errors, registered

    experiments = registered()
    if not experiments:
        print("No experiments are registered.")
    width = max((len(n) for n in experiments), default=0)
    for name, exp in experiments.items():
        print(f"{name:<{width}}  {exp.paper}, {exp.source}")
        print(
            textwrap.fill(
                exp.claim,
                width=100,
                initial_indent=" " * (width + 2),
                subsequent_indent=" " * (width + 2),
            )
        )
    for module, tb in sorted(import_errors().items()):
        last = tb.strip().splitlines()[-1] if tb.strip() else ""
        print(f"warning: experiment module {module!r} failed to import: {last}", file=sys.stderr)
    return 0


def _cmd_reproduce(args: argparse.Namespace) -> int:
    from robustep.experiments.report import STATUS_FAILED
    from robustep.experiments.runner import UnknownExperimentError, reproduce

    try:
        records = reproduce(args.names, args.out, mode=args.mode, seed=args.seed)
    except UnknownExperimentError as exc:
        print(f"robustep reproduce: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"robustep reproduce: interrupted; partial report in {args.out}", file=sys.stderr)
        return 130
    if args.strict and any(r.status == STATUS_FAILED for r in records):
        return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``robustep`` console script; returns the exit status."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits on --help and on usage errors
        return int(exc.code or 0)
    if args.command == "list":
        return _cmd_list()
    return _cmd_reproduce(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
