"""``python -m mxfp4_ablation.studies <command>``: the studies from the command line.

* ``readme-table [--study NAME] [--run DIR] [--update FILE]`` -- print a study's README ladder table from
  the latest summary run (or ``--run``), or replace every study's table between its markers in FILE;
* ``list`` -- the studies, their step notebooks and their figures (FlyDSL-free);
* ``new-step STUDY VARIANT --title ... --sentence ...`` -- the step notebook of a new ladder rung;
* ``modelled [--study NAME] [--out DIR] [--quick] [--no-figures]`` -- the summary's modelled sweep
  (:func:`.modelled_section.main`).

User errors (no summary run yet, a file without markers, an unknown study) exit 2 with one line;
anything else is a bug and shows its traceback.
"""

from __future__ import annotations

import argparse
import sys

from . import STUDIES, get, readme
from .tables import StudyError


def main(argv: list[str] | None = None, study: str | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mxfp4_ablation.studies")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("readme-table", help="print (or --update) the README's ladder table(s) from the data")
    p.add_argument("--study", choices=sorted(STUDIES), default=study,
                   help="one study (default: gemm when printing; every study with markers when updating)")
    p.add_argument("--run", help="summary run folder (default: the latest experiments/*-summary)")
    p.add_argument("--update", metavar="FILE", help="replace the tables between their markers in FILE")
    sub.add_parser("list", help="the studies, their step notebooks and figures")
    n = sub.add_parser("new-step", help="write a ladder rung's step notebook from the template")
    n.add_argument("study", choices=sorted(STUDIES))
    n.add_argument("variant", help="the new ladder rung (its Switch record and builder branch exist)")
    n.add_argument("--title", required=True, help='e.g. "GEMM ladder step 8 · `unroll4`: four K steps per trip"')
    n.add_argument("--sentence", required=True, help="one or two sentences: what the step does, in the seed's terms")
    n.add_argument("--force", action="store_true", help="rewrite an existing notebook")
    m = sub.add_parser("modelled", help="run the summary's modelled sweep (cached); print every step's delta")
    m.add_argument("--study", choices=sorted(STUDIES), action="append")
    m.add_argument("--out", default=None, help="folder for the tables (default: a scratch folder in the cache)")
    m.add_argument("--quick", action="store_true", help="each regime's first device shape only")
    m.add_argument("--no-figures", action="store_true")
    args = parser.parse_args(argv)
    try:
        if args.cmd == "list":
            from .. import figures

            figures.load()
            for name in STUDIES:
                names = sorted(f for f in figures.FIGURES if f.startswith(f"{name}/"))
                print(f"{name}: {len(names)} figures: {', '.join(names)}")
            return 0
        if args.cmd == "modelled":
            from . import modelled_section

            return modelled_section.main(args)
        if args.cmd == "new-step":
            from . import step_notebook

            try:
                path = step_notebook.new_step(get(args.study), args.variant, args.title, args.sentence, args.force)
            except ValueError as err:
                raise StudyError(str(err)) from None
            print(f"wrote {path}")
            return 0
        if args.update:
            names = [args.study] if args.study else list(STUDIES)
            done = readme.update(args.update, [get(n) for n in names], args.run)
            print(f"updated the {', '.join(done)} ladder table(s) in {args.update}")
        else:
            print(readme.table_from_run(get(args.study or "gemm"), args.run))
    except (StudyError, FileNotFoundError) as err:
        print(f"studies: {err}", file=sys.stderr)
        return 2
    return 0
