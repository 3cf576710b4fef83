"""The step notebooks: one template, and the sections every step notebook's cells call.

A step notebook (``notebooks/<study>/NN_<slug>.py``, jupytext percent format) carries only what is its
own: its title, one sentence on what the step does, and its variant. Everything else is here, once:
:func:`run` makes the step's report (:meth:`.engine.Study.step_report`), and each section function
shows one part of it -- :func:`intro` (the switch's record), :func:`correctness`, :func:`isa`,
:func:`hot_loop`, :func:`speed` (measured and published) and :func:`modelled` (the timing model:
:func:`.modelled_section.step_section`) -- with its own heading, tables and figures. A reader opens the
notebook in JupyterLab and reruns a cell with other arguments (``run(variant, mode, cases=[[512, 512,
3072]])``, ``modelled(step, shapes=[[8192, 8192, 8192]])``, ``hot_loop(step, lines=None)``).

``python -m mxfp4_ablation.studies new-step gemm gemm-v10 --title "..." --sentence "..."`` writes a new
step's notebook from :func:`render` (:func:`new_step`); :func:`parse` reads the three values back.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Sequence

from .. import paths

HEADER = """# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: MXFP4 ablation
#     language: python
#     name: mxfp4-ablation
# ---
"""

BODY = '''
# %% tags=["parameters"]
out_dir = None  # set by the runner: the run folder this notebook writes into
mode = "emulated"  # device | emulated | static (set by the runner)
variant = "{variant}"

# %%
from mxfp4_ablation.studies import step_notebook as nb

step = nb.run(variant, mode, out_dir)  # e.g. nb.run(variant, mode, cases=..., seeds=[0, 1]): see nb.run
nb.intro(step)

# %%
nb.correctness(step)

# %%
nb.isa(step)

# %%
nb.hot_loop(step)  # lines=None: the whole loop

# %%
nb.speed(step)

# %%
nb.modelled(step)  # e.g. shapes=[[8192, 8192, 8192]]: the step at one shape
'''


def render(variant: str, title: str, sentence: str) -> str:
    """The notebook text of one step."""
    head = f"\n# %% [markdown]\n# # {title}\n#\n" + "\n".join(f"# {line}".rstrip() for line in _wrap(sentence)) + "\n"
    return HEADER + head + BODY.format(variant=variant)


def _wrap(text: str, width: int = 100) -> list[str]:
    words, lines, line = text.split(), [], ""
    for word in words:
        if line and len(line) + 1 + len(word) > width - 2:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    return lines + ([line] if line else [])


def parse(text: str) -> dict[str, str]:
    """``title``, ``sentence`` and ``variant`` of a step notebook."""
    title = re.search(r"^# # (.+)$", text, re.M)
    variant = re.search(r'^variant = "([^"]+)"$', text, re.M)
    block = re.search(r"^# # .+\n#\n((?:# .*\n)+)", text, re.M)
    if not (title and variant and block):
        raise ValueError("not a step notebook (no title, sentence or variant line)")
    sentence = " ".join(line[2:] for line in block.group(1).splitlines())
    return {"title": title.group(1), "sentence": sentence, "variant": variant.group(1)}


def new_step(study, variant: str, title: str, sentence: str, force: bool = False) -> Path:
    """Write the step notebook of ``variant`` (a ladder rung of ``study``) from the template."""
    from .. import results

    path = paths.REPO_ROOT / "notebooks" / study.name / f"{study.step_slug(variant)}.py"
    if path.exists() and not force:
        raise ValueError(f"{path.relative_to(paths.REPO_ROOT)} exists (use --force to rewrite it)")
    results.atomic_write_text(path, render(variant, title, sentence))
    return path


# ============================================================================ the sections


def run(variant: str, mode: str = "emulated", out_dir: str | Path | None = None, baseline: str | None = None,
        cases: Any = None, isa_cases: Any = None, seeds: Sequence[int] = (0,), iterations: int = 100):
    """The step's :class:`~.engine.StepReport` (its study's :meth:`~.engine.Study.step_report`).

    ``baseline``: None for the ladder predecessor; ``cases``: where the correctness checks (and, on an
    MI355X, the timings) run -- None for the mode's defaults (GEMM: emulated 256x256x3072 and 512x512x3072,
    device PR #990's four shapes; MoE: the small test MoE off-device), a GEMM shape ``[M, N, K]`` or a
    list of them, a MoE dict ``{"decode": [tokens, experts, hidden, inter, topk, block_m], ...}``;
    ``isa_cases``: where the ISA is read, in the same form (None: GEMM 8192^3; MoE Kimi-K2.5 at TP 4,
    decode 16 tokens and prefill 4096); ``iterations``: timed A/B pairs per process (device mode only).
    """
    from .. import variants
    from . import study_of

    study = study_of(variants.get(variant).family)
    return study.step_report(variant, baseline, cases, mode, seeds, out_dir, iterations, isa_cases)


def _show(*items) -> None:
    from IPython.display import Markdown, display

    for item in items:
        display(Markdown(item) if isinstance(item, str) else item)


def intro(step):
    """The switch's own record (the seed's claim, the mechanism, the metric it should move), rendered."""
    from IPython.display import Markdown

    return Markdown("The switch's own record (the seed's claim, the mechanism, the metric it should move), "
                    "rendered:\n\n" + step.study.intro_markdown(step.variant, step.baseline))


def correctness(step) -> None:
    _show("## Correctness\nEvery check of this variant (the emulator off-device, the GPU on an MI355X), at every "
          "shape and seed.", step.verify)


def isa(step) -> None:
    _show("## ISA: what changed from the predecessor\nStatic counts of the offline gfx950 compile; "
          "`step.changed(only_intended=True)` keeps the switch's own.", step.changed(), step.expectations)
    figure = step.figure("isa_diff")
    if figure is not None:
        _show(figure)


def hot_loop(step, lines: int | None = 80) -> None:
    """Per regime, the first ``lines`` rows of the hot loops side by side (None: all); a kernel without a
    loop says so. ``step.hot_loop(regime, lines=None)`` is the whole loop, ``step.isa_text(name, regime)``
    the whole ``.s``."""
    _show("## The hot loop, side by side (predecessor | step)")
    for regime in step.isa_cases:
        loop = step.hot_loop(regime, lines=None)
        where = f"{regime}: " if regime else ""
        if loop.empty or not (loop != "").any().any():
            _show(f"*{where}no loop in either kernel* (straight-line code).")
            continue
        shown = len(loop) if lines is None else min(len(loop), lines)
        _show(f"{where}{len(loop)} loop rows, the first {shown} shown (`lines`).", loop.head(shown))


def speed(step) -> None:
    """Measured speed (an MI355X, paired A/B with CIs) where this run timed the step, and the seed's own
    published figures; the modelled speed is :func:`modelled`'s, shown once, in the next section."""
    _show("## Speed: measured or published\nEvery value says its kind: *measured* (an MI355X, paired A/B with "
          "CIs) or *published* (the seed's own figures); a kind that is missing says why. The timing model's "
          "speed of this step is the next section's (*modelled*).", step.speed_table())
    if step.measured is not None:
        _show(step.figure("speed"))


def modelled(step, shapes: Sequence[Sequence[int]] | None = None):
    """The step and its predecessor in the timing model at ``shapes`` (None: the study's device shapes,
    GEMM PR #990's four, MoE the Kimi-K2.5 TP=4 shape at decode M=16 and prefill M=4096); returns the
    :class:`~.modelled_section.StepModel`."""
    from . import modelled_section

    model = modelled_section.step_section(step, shapes)
    _show("## What this step buys, *modelled*\nThe gfx950emu timing model (every value labelled *modelled*, with "
          "the model's version and clock; never measured): the step and its predecessor; the delta in % with its "
          "interval from the model's held-out residuals (resolved = the interval excludes 0) and what bounds it.",
          model.table(), f"Interval: {model.band['rule']}.",
          "The seed's claim for this step, and whether the model sees it (sign; size where the claim states one):",
          model.verdict_lines(), model.figure("speed_delta"),
          "### Where the cycles go (modelled)\nMFMA-busy and exposed cycles by reason per SIMD (predecessor | step), "
          "and each one's timeline (4 waves + the MFMA pipes): two trips of the hot loop, or, for a kernel without "
          "one (MoE gemm1), the window where wave 0's instruction stream differs from the predecessor's.",
          model.figure("speed_cycles"))
    return model
