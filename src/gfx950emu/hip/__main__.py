"""``python -m gfx950emu.hip build|info``: build the emulated HIP runtime, or show what it reports."""
from __future__ import annotations

import argparse
import json
import sys

from . import PROPERTIES, ShimBuildError, build


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gfx950emu.hip", description=__doc__)
    ap.add_argument("command", choices=["build", "info"])
    ap.add_argument("--force", action="store_true", help="rebuild even if the cached library exists")
    ns = ap.parse_args(argv)
    try:
        path = build(force=ns.force)
    except ShimBuildError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if ns.command == "build":
        print(path)
    else:
        print(json.dumps({"library": str(path), "device": PROPERTIES}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
