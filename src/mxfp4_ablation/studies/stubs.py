"""Step notebooks from one template: a step's file carries only its title, its variant and a sentence.

``python -m mxfp4_ablation.studies new-step gemm gemm-v8 --title "..." --sentence "..."`` writes
``notebooks/gemm/08_<switch>.py``; ``tests/test_notebooks.py`` checks that every step notebook is its
template with its own three values, so the cells stay the same everywhere (and a change to them is made
here, once: ``python -m mxfp4_ablation.studies new-step ... --force`` rewrites a file).

The cells call the engine (:class:`~mxfp4_ablation.studies.engine.StepReport`), one view per cell, so a
reader can change a parameter or a cell and rerun it: the verification, the ISA diff, the hot loops side
by side, the speed of every kind.
"""

from __future__ import annotations

import re
from pathlib import Path

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

#: Per study: the parameters beyond out_dir / mode / variant, and the study module.
PARAMETERS = {
    "gemm": ('baseline = None  # None: the ladder predecessor\n'
             'shapes = None  # None: the mode\'s defaults (emulated: 256x256x3072 and 512x512x3072; device: PR #990\'s)\n'
             'isa_shape = [8192, 8192, 8192]  # where the ISA is read\n'
             'seeds = [0]\n'
             'iterations = 100  # timed A/B pairs per process (device mode only)\n'
             'modelled = True  # the timing model\'s speed too (labelled modelled)\n'
             'modelled_shapes = None  # None: PR #990\'s four; or e.g. [[8192, 8192, 8192]]\n'
             'hot_loop_lines = 80  # rows of the side-by-side hot loop shown; None: all\n',
             "step = gemm.step_report(variant, baseline, shapes, mode, seeds, out_dir, iterations, isa_shape,\n"
             "                        modelled=modelled)"),
    "moe": ('baseline = None  # None: the ladder predecessor\n'
            'cases = None  # None: the mode\'s defaults (off-device: the small test MoE, decode and prefill)\n'
            'isa_cases = None  # None: Kimi-K2.5 at TP 4, decode 16 tokens (block_m 16) and prefill 4096 (block_m 128)\n'
            'seeds = [0]\n'
            'iterations = 100  # timed A/B pairs per process (device mode only)\n'
            'modelled = True  # the timing model\'s speed too (labelled modelled)\n'
            'modelled_shapes = None  # None: the Kimi shape at 16 and 4096 tokens; or [[tokens, 385, 7168, 512, 9, block_m]]\n'
            'hot_loop_lines = 80  # rows of the side-by-side hot loop shown; None: all\n',
            "step = moe.step_report(variant, baseline, cases, mode, seeds, out_dir, iterations, isa_cases,\n"
            "                       modelled=modelled)"),
}

BODY = '''
# %% [markdown]
# The switch's own record (the seed's claim, the mechanism, the metric it should move), rendered:

# %%
from mxfp4_ablation.studies import {study}

{call}
step.intro()

# %% [markdown]
# ## Correctness
# Every check of this variant (the emulator off-device, the GPU on an MI355X), at every shape and seed.

# %%
step.verify

# %% [markdown]
# ## ISA: what changed from the predecessor
# Static counts of the offline gfx950 compile; `step.changed(only_intended=True)` keeps the switch's own.

# %%
step.changed()

# %%
step.expectations

# %%
step.figure("isa_diff")

# %% [markdown]
# ## The hot loop, side by side (predecessor | step)
# Per regime, the first `hot_loop_lines` rows (the parameter; None: all); a kernel without a loop says
# so. `step.hot_loop(regime, lines=None)` is the whole loop, `step.isa_text(name, regime)` the whole `.s`.

# %%
from IPython.display import Markdown, display

for regime in step.isa_cases:
    loop = step.hot_loop(regime, lines=None)
    where = f"{{regime}}: " if regime else ""
    if loop.empty or not (loop != "").any().any():
        display(Markdown(f"*{{where}}no loop in either kernel* (straight-line code)."))
        continue
    shown = len(loop) if hot_loop_lines is None else min(len(loop), hot_loop_lines)
    display(Markdown(f"{{where}}{{len(loop)}} loop rows, the first {{shown}} shown (`hot_loop_lines`)."))
    display(loop.head(shown))

# %% [markdown]
# ## Speed
# Every value says its kind: *measured* (an MI355X, paired A/B with CIs), *modelled* (the gfx950emu timing
# model) or *published* (the seed's own figures); a kind that is missing says why.

# %%
step.speed_table()

# %%
step.figure("speed")
'''


#: The modelled speed section (:mod:`mxfp4_ablation.studies.modelled_section`, #13), appended to every step.
MODELLED = """
# %% [markdown]
# ## What this step buys, *modelled*
# The gfx950emu timing model (every value labelled *modelled*, with the model's version and clock; never
# measured): the step and its predecessor at @WHERE@ (parameter `modelled_shapes`); the delta in % with
# its interval from the model's held-out residuals (the rule is printed below, from
# `experiments/reference/calibration.csv`; resolved = the interval excludes 0) and what bounds it.

# %%
from mxfp4_ablation.studies import modelled_section

model = modelled_section.step_section(step, modelled_shapes) if modelled else None
display(model.table() if model else Markdown("*Not modelled in this run* (`modelled = False`)."))
if model:
    display(Markdown(f"Interval: {model.band['rule']}."))

# %% [markdown]
# The seed's claim for this step, and whether the model sees it (sign; size where the claim states one):

# %%
if model:
    display(Markdown(model.verdict_lines()))
    display(model.figure("speed_delta"))

# %% [markdown]
# ### Where the cycles go (modelled)
# MFMA-busy and exposed cycles by reason per SIMD (predecessor | step), and each one's timeline (4 waves
# + the MFMA pipes): two trips of the hot loop, or, for a kernel without one (MoE gemm1), the window
# where wave 0's instruction stream differs from the predecessor's (e.g. exp2's epilogue).

# %%
if model:
    display(model.figure("speed_cycles"))
"""
WHERE = {"gemm": "PR #990's four shapes",
         "moe": "the Kimi-K2.5 TP=4 shape,\n# decode (M=16) and prefill (M=4096)"}


def render(study: str, variant: str, title: str, sentence: str) -> str:
    """The notebook text of one step."""
    if study not in PARAMETERS:
        raise ValueError(f"no step-notebook template for study {study!r} (known: {', '.join(PARAMETERS)})")
    params, call = PARAMETERS[study]
    head = (f"\n# %% [markdown]\n# # {title}\n#\n" + "\n".join(f"# {line}".rstrip() for line in _wrap(sentence)) + "\n"
            f"\n# %% tags=[\"parameters\"]\n"
            "out_dir = None  # set by the runner: the run folder this notebook writes into\n"
            'mode = "emulated"  # device | emulated | static (set by the runner)\n'
            f'variant = "{variant}"\n' + params)
    return HEADER + head + BODY.format(study=study, call=call) + MODELLED.replace("@WHERE@", WHERE[study])


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
    """``title``, ``sentence`` and ``variant`` of a step notebook written by :func:`render`."""
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
    results.atomic_write_text(path, render(study.name, variant, title, sentence))
    return path
