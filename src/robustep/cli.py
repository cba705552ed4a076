"""The ``robustep`` command line.

::

    robustep list
    robustep reproduce NAME [NAME ...] | all [--quick | --full] [--out DIR] [--seed N]
                       [--jobs N] [--set KEY=VALUE ...] [--resume] [--strict]
    robustep rerender NAME [NAME ...] | all [--out DIR]

Exit status: 0 when the command completed — also when some experiments failed
or lacked data (they are listed prominently in the report and on the console);
1 with ``--strict`` if an experiment failed; 2 for a usage error (unknown
experiment, bad ``--set``/``--jobs``/``--seed``, a report folder that cannot be
written), reported as one line on stderr without a traceback; 130 if interrupted
(the experiments finished before keep their reports, the index is rebuilt and
``--resume`` continues the run).
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from collections.abc import Sequence

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = _OneLineParser(
        prog="robustep",
        description="Robust Expectation Propagation: reproduce the papers' experiments.",
    )
    from robustep import __version__

    parser.add_argument("--version", action="version", version=f"robustep {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_OneLineParser)
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
    rep.add_argument(
        "--seed", type=_seed, default=0, metavar="N", help="random seed, >= 0 (default: 0)"
    )
    rep.add_argument(
        "--jobs",
        type=_jobs,
        default=1,
        metavar="N",
        help="worker processes, -1 for all cores (default: 1): --quick runs of several "
        "experiments run N experiments side by side; otherwise an experiment's independent "
        "units (splits, folds, repetitions) run in N processes; results do not depend on N",
    )
    rep.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="replace one configuration entry of a single experiment; VALUE is JSON "
        "(e.g. --set splits=20 --set 'datasets=[\"pima\"]'); recorded in run.json",
    )
    rep.add_argument(
        "--resume",
        action="store_true",
        help="continue an interrupted run in the same --out: experiments finished with the "
        "same mode, seed and configuration are kept, the others reuse their finished units",
    )
    rep.add_argument(
        "--strict",
        action="store_true",
        help="exit with status 1 if an experiment failed (lacking data is not a failure)",
    )
    rer = sub.add_parser(
        "rerender",
        help="rebuild reports from saved results.json (no computation)",
        description="Call each experiment's report on OUT/NAME/results.json again and "
        "rewrite its README, run.json summary and the index.",
    )
    rer.add_argument("names", nargs="+", metavar="NAME", help="experiment names, or 'all'")
    rer.add_argument(
        "--out", default="report", metavar="DIR", help="report folder (default: report)"
    )
    return parser


def _seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if not 0 <= value < 2**32:
        raise argparse.ArgumentTypeError(f"must be in [0, 2**32), got {value}")
    return value


def _jobs(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1 and value != -1:
        raise argparse.ArgumentTypeError(f"must be >= 1, or -1 for all cores, got {value}")
    return value


class _OneLineParser(argparse.ArgumentParser):
    """Usage errors as one line: ``robustep reproduce: error: ...`` (no usage block)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def _cmd_rerender(args: argparse.Namespace) -> int:
    from robustep.experiments.runner import UnknownExperimentError, rerender

    try:
        done = rerender(args.names, args.out)
    except (UnknownExperimentError, FileNotFoundError, ValueError) as exc:
        print(f"robustep rerender: error: {exc}", file=sys.stderr)
        return 2
    print(f"re-rendered {', '.join(done)} in {args.out}")
    return 0


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


def _parse_overrides(items: Sequence[str], flag: str = "--set") -> dict:
    """``["key=json", ...]`` -> dict; a VALUE that is not JSON is taken as a string.
    ``flag``: the option the items came from, named in the error messages."""
    overrides = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{flag} expects KEY=VALUE, got {item!r}")
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as exc:
            if raw.strip()[:1] in set('[{"-.0123456789') or not raw.strip():
                raise ValueError(
                    f"{flag} {item!r}: VALUE is not valid JSON ({exc.msg} at character "
                    f"{exc.pos}); write e.g. {flag} splits=20, {flag} 'powers=[0.5, 0.8]' "
                    f"or {flag} 'datasets=[\"pima\"]' (strings inside lists are quoted)"
                ) from None
            value = raw  # a bare word is taken as a string: --set dataset=pima
        overrides[key.strip()] = value
    return overrides


def _cmd_reproduce(args: argparse.Namespace) -> int:
    from robustep._optional import has_module

    if not has_module("matplotlib"):  # the reports' figures
        print(
            "robustep reproduce: error: the reproductions draw figures with matplotlib, which "
            "is not installed: pip install 'robustep[experiments]'",
            file=sys.stderr,
        )
        return 2
    from robustep.experiments.report import STATUS_FAILED
    from robustep.experiments.runner import UnknownExperimentError, reproduce

    try:
        overrides = _parse_overrides(args.overrides)
        records = reproduce(
            args.names,
            args.out,
            mode=args.mode,
            seed=args.seed,
            jobs=args.jobs,
            overrides=overrides,
            resume=args.resume,
        )
    except (UnknownExperimentError, ValueError) as exc:
        print(f"robustep reproduce: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(
            f"robustep reproduce: interrupted; the experiments finished before keep their "
            f"reports in {args.out} (index rebuilt); add --resume to the same command to "
            "continue",
            file=sys.stderr,
        )
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
    if args.command == "rerender":
        return _cmd_rerender(args)
    return _cmd_reproduce(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
