"""Run a jupytext percent-format notebook with papermill into a fresh ``experiments/<run-id>/``.

``python -m mxfp4_ablation.notebooks run notebooks/gemm/01_agpr_acc.py [-p name value ...]``

The executed ``.ipynb`` is an output: it lands in the run folder, which is published only when the
notebook ran to the end. A failed run leaves its partly executed notebook in
``experiments/.failed/<name>.ipynb`` for debugging, and no run folder.
The notebook receives the parameters ``out_dir`` (the run folder) and ``mode`` (device, emulated or
static, from :func:`mxfp4_ablation.modes.detect`) on top of its own.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from . import modes, paths, results

KERNEL_NAME = "mxfp4-ablation"


def run_name(source: Path) -> str:
    rel = source.resolve().relative_to((paths.REPO_ROOT / "notebooks").resolve())
    return str(rel.with_suffix("")).replace(os.sep, "--")


def run(source: str | Path, parameters: dict | None = None, kernel_name: str = KERNEL_NAME) -> Path:
    import jupytext
    import papermill

    source = Path(source)
    if not source.is_file() or source.suffix != ".py":
        raise ValueError(f"{source} is not a jupytext .py notebook")
    name = run_name(source)
    mode, reason = modes.detect()
    notebook = jupytext.read(source)
    with tempfile.TemporaryDirectory(prefix="mxfp4-nb-") as tmp:
        src_ipynb = Path(tmp) / f"{source.stem}.ipynb"
        jupytext.write(notebook, src_ipynb)
        executed = Path(tmp) / "out" / f"{source.stem}.ipynb"
        executed.parent.mkdir()
        try:
            with results.run_dir(name) as rd:
                params = {"out_dir": str(rd.path), "mode": mode, **(parameters or {})}
                print(f"[{name}] mode={mode} ({reason}) -> {rd.path.name}", flush=True)
                papermill.execute_notebook(
                    str(src_ipynb), str(executed), parameters=params,
                    kernel_name=kernel_name, language="python", cwd=str(paths.REPO_ROOT), progress_bar=False,
                )
                shutil.copy(executed, rd / executed.name)
        except BaseException:
            if executed.is_file():
                failed = paths.experiments_dir() / ".failed"
                failed.mkdir(parents=True, exist_ok=True)
                shutil.copy(executed, failed / f"{name}.ipynb")
                print(f"[{name}] FAILED; partly executed notebook: {failed / (name + '.ipynb')}", file=sys.stderr)
            raise
    print(f"[{name}] done -> {rd.final}", flush=True)
    return rd.final


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mxfp4_ablation.notebooks")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("run", help="execute one notebook into a new run folder")
    p.add_argument("notebook")
    p.add_argument("-p", "--parameter", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                   help="papermill parameter (VALUE parsed as JSON when it parses)")
    args = parser.parse_args(argv)
    params = {}
    for key, value in args.parameter:
        try:
            params[key] = json.loads(value)
        except json.JSONDecodeError:
            params[key] = value
    try:
        run(args.notebook, params)
    except ValueError as err:
        print(f"notebooks: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
