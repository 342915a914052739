"""The ``attention-course`` command: ``info`` about this installation,
``grade`` submissions."""

from __future__ import annotations

import argparse
import json
import platform
import sys
from collections.abc import Sequence

import attention_course


def collect_info() -> dict[str, object]:
    """Versions, the device the course would use, and whether a CJK font was
    found."""
    import matplotlib
    import torch

    from attention_course.device import ENV_VAR, get_device
    from attention_course.plotting import cjk_font_name

    try:
        device = str(get_device())
    except ValueError as error:
        device = f"error: {error}"
    return {
        "package": attention_course.__version__,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "matplotlib": matplotlib.__version__,
        "device": device,
        "device_override": ENV_VAR,
        "cuda_available": torch.cuda.is_available(),
        "cjk_font": cjk_font_name(),
    }


def _print_info(as_json: bool) -> int:
    info = collect_info()
    if as_json:
        print(json.dumps(info, indent=2))
        return 0
    font = (info["cjk_font"]
            or "none found (Chinese labels fall back to positions)")
    print(f"attention-course {info['package']}")
    print(f"  Python      {info['python']}")
    print(f"  torch       {info['torch']}")
    print(f"  matplotlib  {info['matplotlib']}")
    print(f"  device      {info['device']}  "
          f"(override with {info['device_override']}=cpu|cuda|mps)")
    print(f"  CJK font    {font}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="attention-course",
        description="Companion tool of the course "
        "'Attention, from kernels to Transformers'.",
    )
    parser.add_argument(
        "--version", action="version",
        version=f"%(prog)s {attention_course.__version__}",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    info = sub.add_parser(
        "info", help="show versions, the device in use and the CJK font"
    )
    info.add_argument(
        "--json", action="store_true", help="print the information as JSON"
    )
    from attention_course.grading.cli import (
        add_grade_parser,
        add_merge_parser,
        add_platform_parsers,
    )

    add_grade_parser(sub)
    add_merge_parser(sub)
    add_platform_parsers(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "info":
        return _print_info(args.json)
    if args.command in ("grade", "merge", "export", "feedback", "report"):
        # attention_course.grading.cli registers these subcommands and sets each
        # one's handler as the parser default ``run``.
        return int(args.run(args))
    parser.print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())
