"""The `superpod` command line."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="superpod", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    from superpod.commands import demo, plan, top, usage
    from superpod.controller import operator as operator_cli
    from superpod.hardware import cli as hardware_cli
    from superpod.localcluster import cli as cluster_cli
    from superpod.simulate import cli as simulate_cli

    cluster_cli.register(sub)
    hardware_cli.register(sub)
    operator_cli.register(sub)
    plan.register(sub)
    simulate_cli.register(sub)
    demo.register(sub)
    usage.register(sub)
    top.register(sub)
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
