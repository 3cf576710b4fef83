"""Kernel families: the records a kernel module declares, the contract it implements, and the one registry.

A *family* is one kernel builder (``kernels/gemm/``, ``kernels/moe_gemm1.py``, ``kernels/moe_gemm2.py``)
plus the optimisation steps it can switch on. Everything the study knows about a step comes from one
:class:`Switch` record declared next to the builder: the seed it is taken from, the seed's claim, the
mechanism, the metric moves it should cause (:class:`Expect`) and the switches it needs. Docstrings
(:func:`document`), expectation tables, notebook intros and README rows are rendered from those records.

The contract a kernel module implements is :class:`KernelFamily` (module-level names). :func:`register`
checks it when the family registers -- one error naming every missing or malformed member -- and returns
a :class:`Family`, the registered view: ladder, leave-one-out set, variant lookup and switch validation,
implemented here once for every family -- and every other *valid switch subset* (each switch's
``requires`` on too): :meth:`Family.subsets`, their canonical names (:meth:`Family.subset_name`:
``gemm+agpr_acc+k_unroll4``, parsed back by :meth:`Family.parse_subset`, also as ``gemm@<hex mask>``),
and a leave-one-out set for every switch, a required one with its dependents
(:meth:`Family.leave_one_out_all`). :data:`FAMILIES` is the one list of family modules; adding a
family is one kernel module plus one entry there.

This module imports neither torch nor FlyDSL; registering a family imports its kernel module, which
must itself load FlyDSL lazily (on the first ``build``), so reading ladders and records stays cheap.
"""

from __future__ import annotations

import importlib
import inspect
import math
import sys
import types
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Protocol, Sequence, runtime_checkable

from .errors import UsageError

#: Family name -> kernel module: the one registry list (a new family is one entry here).
FAMILIES: dict[str, str] = {
    "gemm": "mxfp4_ablation.kernels.gemm",
    "moe1": "mxfp4_ablation.kernels.moe_gemm1",
    "moe2": "mxfp4_ablation.kernels.moe_gemm2",
}

DIRECTIONS = ("up", "down", "zero", "same")
COMPARES = ("exact", "close")


class ContractError(TypeError):
    """A kernel module does not implement :class:`KernelFamily` (raised when it registers)."""


# ============================================================================ records


@dataclass(frozen=True)
class Seed:
    """Where a step comes from: an upstream pull request, its merge commit, and a link."""

    project: str  #: "ROCm/FlyDSL", "ROCm/aiter"
    pr: int
    commit: str = ""  #: merge commit (or the commit the claim is quoted from)
    title: str = ""
    url: str = ""  #: defaults to the PR's GitHub page

    def __post_init__(self):
        if not self.url:
            object.__setattr__(self, "url", f"https://github.com/{self.project}/pull/{self.pr}")

    @property
    def label(self) -> str:
        """``"FlyDSL PR #990, 741f3d6d"``."""
        name = self.project.rsplit("/", 1)[-1]
        return f"{name} PR #{self.pr}" + (f", {self.commit[:10]}" if self.commit else "")

    def __str__(self) -> str:
        return self.label


@dataclass(frozen=True)
class Expect:
    """One metric move a switch should cause, on the ISA (``metric`` is a :mod:`mxfp4_ablation.metrics`
    key of the family's metric set).

    ``direction``: ``up`` / ``down`` (strictly), ``zero`` (falls to 0: the switch-on value is 0 and
    the switch-off value is not) or ``same`` (unchanged). ``seed_before`` / ``seed_after``: the seed's own numbers, where it gives them (quoted,
    for the seed's kernel, not ours). ``note``: what the number means or why ours differs.
    ``regimes``: the regimes the switch acts in (empty: all); in any other regime the switch leaves the
    kernel as it was, so the metric is expected to stay the ``same`` there (see :meth:`direction_in`).
    """

    metric: str
    direction: str
    seed_before: float | None = None
    seed_after: float | None = None
    note: str = ""
    regimes: tuple[str, ...] = ()

    def __post_init__(self):
        if self.direction not in DIRECTIONS:
            raise ValueError(f"Expect({self.metric!r}): direction must be one of {', '.join(DIRECTIONS)}, "
                             f"got {self.direction!r}")

    def direction_in(self, regime: str | None) -> str:
        """The expected direction in ``regime`` (None: a family without regimes)."""
        if not self.regimes or regime is None or regime in self.regimes:
            return self.direction
        return "same"

    def holds(self, before: float | None, after: float | None) -> bool:
        """Did the metric move this way from ``before`` (switch off) to ``after`` (switch on)?
        False when either value is missing (None / NaN), except that ``same`` holds when both are (a
        metric neither kernel has, e.g. hot-loop counts of two loop-free kernels, did not change)."""
        missing = [v is None or (isinstance(v, float) and math.isnan(v)) for v in (before, after)]
        if any(missing):
            return self.direction == "same" and all(missing)
        if self.direction == "down":
            return after < before
        if self.direction == "up":
            return after > before
        if self.direction == "zero":
            return after == 0 < before
        return after == before

    def text(self) -> str:
        """``"`loop_s_waitcnt_per_4k` down (seed: 68 -> 8)"``."""
        seed = ""
        if self.seed_before is not None or self.seed_after is not None:
            seed = f" (seed: {_num(self.seed_before)} -> {_num(self.seed_after)})"
        where = f" ({', '.join(self.regimes)} only)" if self.regimes else ""
        return f"`{self.metric}` {self.direction}{where}{seed}"


def _num(v) -> str:
    if v is None:
        return "?"
    return str(int(v)) if float(v).is_integer() else f"{v:g}"


@dataclass(frozen=True)
class Switch:
    """One optimisation step of one kernel builder.

    ``summary``: one sentence (what the switch does); ``claim``: the seed's claim in its own terms,
    numbers included; ``mechanism``: how our builder implements it; ``metric``: the ISA evidence in
    words (what to look at, and what ours shows); ``expects``: the checkable part of ``metric``;
    ``requires``: switches that must be on too. ``defined_in``: the source file that made the record
    (set by the constructor from its caller; the notebooks cite it).
    """

    name: str
    summary: str
    seed: Seed
    claim: str
    mechanism: str
    metric: str
    expects: tuple[Expect, ...] = ()
    requires: tuple[str, ...] = ()
    defined_in: str = field(default="", compare=False)

    def __post_init__(self):
        if not self.defined_in:  # frame 1: the dataclass __init__; frame 2: whoever called Switch(...)
            object.__setattr__(self, "defined_in", sys._getframe(2).f_globals.get("__file__") or "")
        if not self.name.isidentifier():
            raise ValueError(f"switch name {self.name!r} must be a Python identifier (it is a build keyword)")
        for name in ("summary", "claim", "mechanism", "metric"):
            if not str(getattr(self, name)).strip():
                raise ValueError(f"switch {self.name}: {name} is empty")
        object.__setattr__(self, "expects", tuple(self.expects))
        object.__setattr__(self, "requires", tuple(self.requires))
        for e in self.expects:
            if not isinstance(e, Expect):
                raise ValueError(f"switch {self.name}: expects holds {e!r}, not an Expect")

    @property
    def doc(self) -> str:
        """The switch as one paragraph: summary, ``Seed claim (<seed>): ...``, ``Mechanism: ...``,
        ``Metric: ...`` (and ``Requires ...``)."""
        text = (f"{self.summary} Seed claim ({self.seed.label}): {self.claim} Mechanism: {self.mechanism} "
                f"Metric: {self.metric}")
        if self.requires:
            text += f" Requires {', '.join(self.requires)}."
        return text

    def parts(self) -> dict[str, str]:
        """``summary, seed, mechanism, metric`` as rendered lines (what ``studies`` used to regex out of
        the prose)."""
        return {"summary": self.summary, "seed": f"Seed claim ({self.seed.label}): {self.claim}",
                "mechanism": f"Mechanism: {self.mechanism}", "metric": f"Metric: {self.metric}"}


@dataclass(frozen=True)
class Output:
    """One tensor a kernel writes, and how :func:`mxfp4_ablation.runner.verify` compares it.

    ``exact``: byte for byte (quantised values, scales, integer results); ``mismatches`` counts elements
    whose bytes differ. ``close``: every element within ``max_ulp`` units in the last place of the
    output dtype at ``|reference|`` plus ``max_abs``, and the cosine at least ``min_cosine``. ``why``
    justifies the bound from the reference's rounding.
    """

    name: str
    compare: str
    why: str
    max_ulp: float | None = None
    max_abs: float | None = None
    min_cosine: float | None = None

    def __post_init__(self):
        if self.compare not in COMPARES:
            raise ValueError(f"Output {self.name!r}: compare must be one of {', '.join(COMPARES)}, "
                             f"got {self.compare!r}")
        if self.compare == "close" and self.max_ulp is None and self.max_abs is None:
            raise ValueError(f"Output {self.name!r}: a close comparison needs max_ulp or max_abs")
        if not self.why.strip():
            raise ValueError(f"Output {self.name!r}: say why the comparison is what it is (why=...)")


def switch_table(*switches: Switch) -> Mapping[str, Switch]:
    """Switch records in ladder order -> a read-only ``name -> Switch`` mapping (iterating gives the
    names). Checks names are unique and every ``requires`` names an EARLIER switch (the ladder turns
    switches on in this order, so each rung is valid)."""
    table: dict[str, Switch] = {}
    for s in switches:
        if not isinstance(s, Switch):
            raise ValueError(f"switch_table takes Switch records, got {s!r}")
        if s.name in table:
            raise ValueError(f"switch {s.name} is declared twice")
        late = [r for r in s.requires if r not in table]
        if late:
            raise ValueError(f"switch {s.name} requires {', '.join(late)}, which must be declared before it")
        table[s.name] = s
    return types.MappingProxyType(table)


def document(doc: str | None, switches: Mapping[str, Switch]) -> str:
    """``doc`` with the switch table appended (for a kernel module's ``__doc__``): one entry per switch
    with its seed, claim, mechanism, metric and expected moves."""
    lines = [(doc or "").rstrip(), "", "Switches (ladder order; rendered from the :class:`~mxfp4_ablation.family.Switch`"
             " records)::", ""]
    for n, s in enumerate(switches.values(), 1):
        lines.append(f"    {n}. {s.name}" + (f" (requires {', '.join(s.requires)})" if s.requires else ""))
        lines.append(f"       {s.summary}")
        lines.append(f"       seed: {s.seed.label} {s.seed.url}")
        if s.expects:
            lines.append("       expects: " + "; ".join(e.text().replace("`", "") for e in s.expects))
    return "\n".join(lines) + "\n"


# ============================================================================ contract


@runtime_checkable
class KernelFamily(Protocol):
    """What a kernel module provides (module-level names). Shapes are keyword arguments named by
    ``SHAPE_PARAMS`` (+ ``OPTIONAL_SHAPE_PARAMS``); switches are keywords ``name=True``.

    * ``NAME`` -- the family (``"gemm"``), also the ladder's prefix: ``gemm-v0`` .. ``gemm-vN``;
    * ``LABEL`` -- how errors name it (``"GEMM"``, ``"moe1"``, ``"MoE gemm2"``);
    * ``SWITCHES`` -- :func:`switch_table` of :class:`Switch` records, in ladder order;
    * ``SHAPE_PARAMS`` / ``OPTIONAL_SHAPE_PARAMS`` -- the names of ``--shape``'s numbers;
    * ``OUTPUTS`` -- every tensor the kernel writes (:class:`Output`; the first is the primary one);
    * ``METRICS`` -- the name of its metric set in :mod:`mxfp4_ablation.metrics` (kernels never import
      analysis code; the metrics layer looks the name up);
    * ``check_shape(**shape) -> dict`` -- validate (one clear ValueError) and fill defaults;
    * ``make_inputs(**shape, seed=0) -> dict`` -- every buffer, keyed by kernel-argument name
      (outputs zeroed);
    * ``reference(inputs) -> dict`` -- output name -> the tensor it must hold;
    * ``launch_config(**shape) -> (grid, block)``;
    * ``kernel_args(inputs, **switches) -> list`` -- the emulator's kernarg entries;
    * ``device_args(inputs, **switches) -> tuple`` -- the FlyDSL launcher's arguments;
    * ``build(**shape, **switches)`` -- the ``@flyc.jit`` launcher;
    * ``compile_entry(**shape, variant_name=None, **switches) -> (launcher, args)`` -- the
      ``toolchain.compile`` target;
    * ``flops(**shape)`` / ``bytes(**shape)`` -- useful work and compulsory DRAM traffic of one launch.
    """

    NAME: str
    LABEL: str
    SWITCHES: Mapping[str, Switch]
    SHAPE_PARAMS: tuple[str, ...]
    OPTIONAL_SHAPE_PARAMS: tuple[str, ...]
    OUTPUTS: tuple[Output, ...]
    METRICS: str

    def check_shape(self, **shape) -> dict: ...
    def make_inputs(self, **shape) -> dict: ...
    def reference(self, inputs: dict) -> dict: ...
    def launch_config(self, **shape) -> tuple: ...
    def kernel_args(self, inputs: dict, **switches) -> list: ...
    def device_args(self, inputs: dict, **switches) -> tuple: ...
    def build(self, **kwargs) -> Any: ...
    def compile_entry(self, **kwargs) -> tuple: ...
    def flops(self, **shape) -> float: ...
    def bytes(self, **shape) -> float: ...


_CONSTANTS = {"NAME": str, "LABEL": str, "SWITCHES": Mapping, "SHAPE_PARAMS": tuple,
              "OPTIONAL_SHAPE_PARAMS": tuple, "OUTPUTS": tuple, "METRICS": str}
#: member -> how it is called (shape: takes every shape parameter by keyword).
_FUNCTIONS = {"check_shape": "shape", "make_inputs": "shape+seed", "reference": "inputs",
              "launch_config": "shape", "kernel_args": "inputs+switches", "device_args": "inputs+switches",
              "build": "shape+switches", "compile_entry": "shape+switches", "flops": "shape", "bytes": "shape"}


def _contract_problems(module) -> list[str]:
    problems = []
    for name, kind in _CONSTANTS.items():
        if not hasattr(module, name):
            problems.append(f"{name} is missing")
        elif not isinstance(getattr(module, name), kind):
            problems.append(f"{name} must be a {kind.__name__}, got {type(getattr(module, name)).__name__}")
    ok = not problems
    shape = (tuple(getattr(module, "SHAPE_PARAMS", ())) + tuple(getattr(module, "OPTIONAL_SHAPE_PARAMS", ()))
             if ok else ())
    if ok:
        for s in module.SWITCHES.values():
            if not isinstance(s, Switch):
                problems.append(f"SWITCHES holds {s!r}, not a Switch record")
        for key, s in module.SWITCHES.items():
            if isinstance(s, Switch) and key != s.name:
                problems.append(f"SWITCHES key {key!r} names switch {s.name!r}")
            for r in getattr(s, "requires", ()):
                if r not in module.SWITCHES:
                    problems.append(f"switch {key} requires unknown switch {r}")
        if not module.OUTPUTS or not all(isinstance(o, Output) for o in module.OUTPUTS):
            problems.append("OUTPUTS must be a non-empty tuple of Output records")
        if not module.SHAPE_PARAMS:
            problems.append("SHAPE_PARAMS is empty")
    for name, kind in _FUNCTIONS.items():
        func = getattr(module, name, None)
        if func is None:
            problems.append(f"{name}() is missing")
            continue
        if not callable(func):
            problems.append(f"{name} is not callable")
            continue
        params = inspect.signature(func).parameters
        var_kw = any(p.kind is p.VAR_KEYWORD for p in params.values())
        if "shape" in kind:
            absent = [p for p in shape if p not in params and not var_kw]
            if absent:
                problems.append(f"{name}() does not take the shape parameter(s) {', '.join(absent)}")
        if "seed" in kind and "seed" not in params and not var_kw:
            problems.append(f"{name}() does not take seed=")
        if "switches" in kind and not var_kw:
            problems.append(f"{name}() does not take the switches as **keywords")
        if kind.startswith("inputs") and not params:
            problems.append(f"{name}() takes no inputs argument")
    return problems


# ============================================================================ registered view


@dataclass(frozen=True)
class Family:
    """A registered kernel family: its module (the :class:`KernelFamily` implementation) and what is
    derived from the records once -- ladder, leave-one-out set, lookup, switch validation."""

    name: str
    module_name: str
    label: str
    switches: Mapping[str, Switch] = field(repr=False)
    shape_params: tuple[str, ...]
    optional_shape_params: tuple[str, ...]
    outputs: tuple[Output, ...]
    metrics: str

    @property
    def module(self):
        return importlib.import_module(self.module_name)

    @property
    def target(self) -> str:
        """The ``toolchain.compile`` target."""
        return f"{self.module_name}:compile_entry"

    # ---------------------------------------------------------------- variants
    @property
    def ladder(self) -> list[tuple[str, frozenset]]:
        """``[(name, switches)]``: ``<NAME>-v0`` (nothing on) .. ``<NAME>-vN`` (all on), cumulative in
        :attr:`switches` order."""
        order = list(self.switches)
        return [(f"{self.name}-v{i}", frozenset(order[:i])) for i in range(len(order) + 1)]

    @property
    def full(self) -> str:
        """The last rung's name (``gemm-v9``)."""
        return self.ladder[-1][0]

    def leave_one_out(self) -> list[tuple[str, frozenset]]:
        """``[(name, switches)]``: the last rung without each switch no other switch requires, named
        ``<last rung>-no-<switch>``."""
        full_name, full = self.ladder[-1]
        needed = {r for s in self.switches.values() for r in s.requires}
        return [(f"{full_name}-no-{s}", full - {s}) for s in self.switches if s not in needed]

    def variant_names(self) -> list[str]:
        return [n for n, _ in self.ladder + self.leave_one_out()]

    def switch_set(self, variant_name: str) -> frozenset:
        """The switch set of a ladder, leave-one-out or subset variant name (UsageError naming the known
        forms)."""
        for n, s in self.ladder + self.leave_one_out():
            if n == variant_name:
                return s
        sw = self.parse_subset(variant_name)
        if sw is not None:
            return sw
        raise UsageError(f"unknown {self.label} variant {variant_name!r}; known: {', '.join(self.variant_names())}, "
                         f"or any valid subset as {self.name}+SWITCH+SWITCH... / {self.name}@MASK.")

    # ---------------------------------------------------------------- subsets
    # A *subset variant* is any set of switches whose ``requires`` hold (each switch's requirements are
    # on too). Its canonical name (:meth:`subset_name`) is the ladder rung's or the leave-one-out
    # variant's name when the set is one of those (so the ladder keeps its names), else
    # ``<NAME>+<switch>+<switch>...`` in ladder order (``gemm+agpr_acc+k_unroll4``; ``+`` needs no
    # quoting in a shell, braces would be brace-expanded). :meth:`parse_subset` also reads
    # ``<NAME>@<hex mask>`` (bit i = the i-th switch in ladder order, :meth:`mask`) and, quoted,
    # ``<NAME>{a,b}``, in any switch order. The compile and timing caches key by switch set and shape,
    # never by name, so every spelling of one set shares one compile.

    def mask(self, switches: Iterable[str]) -> int:
        """The bitmask of a switch set: bit i = the i-th switch in ladder order."""
        order = list(self.switches)
        return sum(1 << order.index(s) for s in self.check_switches(switches, validate=False))

    def from_mask(self, mask: int) -> frozenset:
        order = list(self.switches)
        if not 0 <= mask < (1 << len(order)):
            raise UsageError(f"{self.label} subset mask {mask:#x} is out of range (0 .. {(1 << len(order)) - 1:#x})")
        return frozenset(s for i, s in enumerate(order) if mask >> i & 1)

    def is_valid(self, switches: Iterable[str]) -> bool:
        """Every switch known and every switch's ``requires`` on too."""
        sw = frozenset(switches)
        return sw <= set(self.switches) and all(set(self.switches[s].requires) <= sw for s in sw)

    def subsets(self) -> list[frozenset]:
        """Every valid subset, by size then by mask (deterministic): the empty set first, all switches last."""
        order = list(self.switches)
        out = [self.from_mask(m) for m in range(1 << len(order))]
        return sorted((s for s in out if self.is_valid(s)), key=lambda s: (len(s), self.mask(s)))

    def dependents(self, switch: str) -> frozenset:
        """The switches that need ``switch`` on, directly or through another switch."""
        out: set[str] = set()
        grew = True
        while grew:
            grew = False
            for s in self.switches.values():
                if s.name not in out and ({switch} | out) & set(s.requires):
                    out.add(s.name)
                    grew = True
        return frozenset(out)

    def leave_one_out_all(self) -> list[tuple[str, frozenset, frozenset]]:
        """``[(name, switches, dropped_too)]`` for EVERY switch in ladder order: the last rung without it
        and without its :meth:`dependents` (``dropped_too``; empty for a switch nothing requires, whose
        entry is the :meth:`leave_one_out` variant). A switch others require has no valid set "all but
        it", so its entry drops its dependents as well and says so: ``gemm-v9-no-g2s_m0`` is the last
        rung without ``g2s_m0``, ``scale_prefetch`` and ``b_carry``."""
        full_name, full = self.ladder[-1]
        return [(f"{full_name}-no-{s}", full - {s} - self.dependents(s), self.dependents(s)) for s in self.switches]

    def subset_name(self, switches: Iterable[str]) -> str:
        """The canonical name of a valid switch set (see the section comment above)."""
        sw = self.check_switches(switches)
        for n, s in self.ladder + self.leave_one_out():
            if s == sw:
                return n
        for n, s, _ in self.leave_one_out_all():
            if s == sw:
                return n
        return "+".join([self.name] + [s for s in self.switches if s in sw])

    def parse_subset(self, name: str) -> frozenset | None:
        """A subset name (any spelling of :meth:`subset_name`, ``<NAME>@<hex>``, ``<NAME>{a,b}``) ->
        its validated switch set; None when ``name`` is not of this family's subset forms. An unknown
        switch or a missing requirement is one UsageError."""
        for n, s, _ in self.leave_one_out_all():
            if n == name:
                return s
        rest = name[len(self.name):] if name.startswith(self.name) else None
        if not rest:
            return None
        if rest[0] == "@":
            try:
                mask = int(rest[1:], 16)
            except ValueError:
                raise UsageError(f"subset {name!r}: the mask after '@' must be hexadecimal") from None
            return self.check_switches(self.from_mask(mask))
        if rest[0] == "+":
            parts = rest[1:].split("+") if rest[1:] else []
        elif rest[0] == "{" and rest.endswith("}"):
            parts = [p.strip() for p in rest[1:-1].split(",") if p.strip()]
        else:
            return None
        if len(set(parts)) != len(parts):
            raise UsageError(f"subset {name!r} names a switch twice")
        return self.check_switches(parts)

    # ---------------------------------------------------------------- validation
    def check_switches(self, switches: Iterable[str], validate: bool = True) -> frozenset:
        """Names -> frozenset; one ValueError for an unknown switch or (``validate``) a missing requirement."""
        sw = frozenset(switches)
        unknown = sorted(sw - set(self.switches))
        if unknown:
            raise UsageError(f"unknown {self.label} switch(es) {', '.join(unknown)}; known: {', '.join(self.switches)}.")
        for s in (self.switches.values() if validate else ()):
            if s.name in sw:
                for dep in s.requires:
                    if dep not in sw:
                        raise UsageError(f"switch {s.name} depends on {dep}; enable {dep} too.")
        return sw

    def switch_kwargs(self, switches: Mapping[str, Any]) -> frozenset:
        """``{name: True/False}`` build keywords -> the validated set of those that are on."""
        bad = [n for n, v in switches.items() if not isinstance(v, bool)]
        if bad:
            raise UsageError(f"{self.label} switches take True/False; got "
                             f"{', '.join(f'{n}={switches[n]!r}' for n in bad)}.")
        return self.check_switches(n for n, on in switches.items() if on)

    def resolve(self, variant_name: str | None, switches: Mapping[str, Any]) -> dict[str, bool]:
        """``compile_entry``'s ``variant_name`` or switch keywords -> switch keywords."""
        if variant_name is None:
            return dict(switches)
        if switches:
            raise UsageError("give either variant_name or individual switches, not both.")
        return {s: True for s in self.switch_set(variant_name)}

    def shape(self, numbers: Sequence[int]) -> dict[str, int]:
        """``--shape`` numbers -> shape keywords (checks the count only; ``check_shape`` the values)."""
        names, optional = self.shape_params, self.optional_shape_params
        if not len(names) <= len(numbers) <= len(names) + len(optional):
            spec = ",".join(names) + "".join(f"[,{o}]" for o in optional)
            raise UsageError(f"{self.name} takes a shape {spec}; got {len(numbers)} numbers")
        return dict(zip(names + optional, numbers))

    def shape_spec(self) -> str:
        return ",".join(self.shape_params) + "".join(f"[,{o}]" for o in self.optional_shape_params)

    def output(self, name: str) -> Output:
        for o in self.outputs:
            if o.name == name:
                return o
        raise ValueError(f"{self.name} has no output {name!r} (outputs: {', '.join(o.name for o in self.outputs)})")


_REGISTRY: dict[str, Family] = {}


def register(module: str | types.ModuleType) -> Family:
    """Check a kernel module against :class:`KernelFamily` and register it (idempotent).

    Raises :class:`ContractError` listing every missing or malformed member, naming the module.
    """
    mod = importlib.import_module(module) if isinstance(module, str) else module
    problems = _contract_problems(mod)
    if problems:
        raise ContractError(f"{mod.__name__} is not a kernel family: " + "; ".join(problems))
    fam = Family(name=mod.NAME, module_name=mod.__name__, label=mod.LABEL, switches=mod.SWITCHES,
                 shape_params=tuple(mod.SHAPE_PARAMS), optional_shape_params=tuple(mod.OPTIONAL_SHAPE_PARAMS),
                 outputs=tuple(mod.OUTPUTS), metrics=mod.METRICS)
    other = _REGISTRY.get(fam.name)
    if other is not None and other.module_name != fam.module_name:
        raise ContractError(f"family {fam.name!r} is registered twice ({other.module_name}, {fam.module_name})")
    _REGISTRY[fam.name] = fam
    return fam


def unregister(name: str) -> None:
    """Forget a registered family (tests registering a stub clean up with this)."""
    _REGISTRY.pop(name, None)


def all_families() -> dict[str, Family]:
    """Every family of :data:`FAMILIES` (registered on first use) plus any registered by hand."""
    for name, module in FAMILIES.items():
        if name not in _REGISTRY:
            register(module)
    return dict(_REGISTRY)


def get(name: str) -> Family:
    """The registered family ``name`` (ValueError naming the known ones)."""
    if name not in _REGISTRY and name in FAMILIES:
        register(FAMILIES[name])
    if name not in _REGISTRY:
        raise UsageError(f"unknown kernel family {name!r} (known: {', '.join({**FAMILIES, **_REGISTRY})})")
    return _REGISTRY[name]


def of_module(module_name: str) -> Family:
    """The family a kernel module implements (for the module's own helpers)."""
    for fam in _REGISTRY.values():
        if fam.module_name == module_name:
            return fam
    return register(module_name)


__all__ = ["FAMILIES", "ContractError", "Seed", "Expect", "Switch", "Output", "switch_table", "document",
           "KernelFamily", "Family", "register", "unregister", "all_families", "get", "of_module"]
