"""``asynctrace groups``: the registered span groups, their buckets, the presets, a spec."""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Iterable
from typing import Any

import asynctrace
from asynctrace import BY_CATEGORY, ConfigurationError, SpanGroup

from ._common import CliError, HelpFormatter

__all__ = ["add_parser", "run"]

EPILOG = """\
examples:
  asynctrace groups
  asynctrace groups generation per_step
  asynctrace groups --resolve 'default,generation,reward'
  asynctrace groups --import mytrainer.telemetry --resolve per_step --json

Groups are registered when the library that declares them is imported; use
--import to list a library's groups. An unknown name exits with status 2 and
the list of known names.
"""


def add_parser(subparsers: Any) -> None:
    """Register the ``groups`` subcommand."""
    parser = subparsers.add_parser(
        "groups",
        help="list span groups, buckets and presets; resolve a spec",
        description="List the registered span groups (bucket, umbrella, per-item) and "
        "presets, or what a span-group spec resolves to.",
        epilog=EPILOG,
        formatter_class=HelpFormatter,
    )
    parser.add_argument(
        "names", nargs="*", metavar="NAME", help="only these groups or presets (default: all)"
    )
    parser.add_argument(
        "--resolve", metavar="SPEC", help="print the groups SPEC enables (no NAME then)"
    )
    parser.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="MODULE",
        help="import MODULE first (it registers its groups); repeatable",
    )
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.set_defaults(run=run)


def _bucket(group: SpanGroup) -> str:
    if group.bucket is None:
        return "-"
    if group.bucket == BY_CATEGORY:
        return "by category"
    return str(group.bucket)


def _kind(group: SpanGroup) -> str:
    return "umbrella" if group.is_umbrella else "leaf"


def _group_dict(group: SpanGroup) -> dict[str, Any]:
    return {
        "name": group.name,
        "bucket": None if group.bucket is None else str(group.bucket),
        "umbrella": group.is_umbrella,
        "per_item": group.per_item,
        "description": group.description,
    }


def _known() -> str:
    presets = ", ".join(sorted(asynctrace.registered_presets()))
    names = ", ".join(sorted(asynctrace.registered_span_groups()))
    return f"known presets: {presets}; known groups: {names}"


def _import(modules: Iterable[str]) -> None:
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception as exc:
            raise CliError(f"--import {module}: {type(exc).__name__}: {exc}") from None


def run(args: argparse.Namespace) -> int:
    """Run ``asynctrace groups``."""
    _import(args.imports)
    groups = asynctrace.registered_span_groups()
    presets = asynctrace.registered_presets()
    if args.resolve is not None:
        if args.names:
            raise CliError(
                f"NAME arguments ({' '.join(args.names)}) and --resolve cannot be combined: "
                "--resolve lists what its SPEC enables (see 'asynctrace groups --help')"
            )
        if not any(part.strip() for part in args.resolve.split(",")):
            # the rule configure() applies to a written span_groups
            raise CliError(
                f"--resolve: {args.resolve!r} names no group; accepted: comma-separated "
                "presets and group names, such as 'default' or 'per_step,per_prompt'"
            )
        try:
            enabled = asynctrace.resolve_span_groups(args.resolve)
        except ConfigurationError as exc:
            raise CliError(str(exc)) from None
        chosen = [groups[name] for name in sorted(enabled) if name in groups]
        if args.json:
            _print_json({"spec": args.resolve, "groups": [_group_dict(g) for g in chosen]})
        else:
            plural = "s" if len(chosen) != 1 else ""
            if not chosen:
                print(f"{args.resolve!r} enables no groups")
            else:
                print(f"{args.resolve!r} enables {len(chosen)} group{plural}:")
                _print_table(chosen)
        return 0
    wanted_groups = sorted(groups)
    wanted_presets = sorted(presets)
    if args.names:
        names = [name.strip().lower() for name in args.names]
        unknown = [n for n in names if n not in groups and n not in presets]
        if unknown:
            listed = ", ".join(repr(n) for n in unknown)
            plural = "s" if len(unknown) > 1 else ""
            raise CliError(f"unknown group or preset name{plural} {listed}; {_known()}")
        wanted_groups = [n for n in names if n in groups]
        wanted_presets = [n for n in names if n in presets]
    if args.json:
        _print_json(
            {
                "groups": [_group_dict(groups[n]) for n in wanted_groups],
                "presets": {n: sorted(presets[n]) for n in wanted_presets},
            }
        )
        return 0
    if wanted_groups:
        print(f"groups ({len(wanted_groups)}):")
        _print_table([groups[n] for n in wanted_groups])
        if any(groups[n].bucket == BY_CATEGORY for n in wanted_groups):
            print(
                "  'by category': an efficiency span's bucket comes from its category: "
                "idle/* -> idle, wasted/* -> wasted, other categories unbucketed "
                "(change with set_efficiency_bucket)."
            )
    if wanted_presets:
        if wanted_groups:
            print()
        print(f"presets ({len(wanted_presets)}):")
        width = max(len(n) for n in wanted_presets)
        for name in wanted_presets:
            members = ", ".join(sorted(presets[name])) or "(nothing registered)"
            print(f"  {name.ljust(width)}  {members}")
    return 0


def _print_table(groups: list[SpanGroup]) -> None:
    headers = ["name", "bucket", "kind", "per item", "description"]
    rows = [
        [g.name, _bucket(g), _kind(g), "yes" if g.per_item else "", str(g.description)]
        for g in groups
    ]
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]
    for row in [headers, *rows]:
        print("  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def _print_json(document: Any) -> None:
    sys.stdout.write(json.dumps(document, indent=2) + "\n")
