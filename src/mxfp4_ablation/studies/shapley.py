"""Shapley attribution over switch subsets: the game theory, pure (no pandas, no FlyDSL, no model).

A *game* here is a value ``v(S)`` for every **valid** switch set ``S`` (every switch's ``requires`` on
too): ``v(S) = ln TFLOPS(S)`` in the study, so values add along any ordering and the shares of all
switches add up exactly to ``v(all) - v(none)``, the whole ladder's log gain.

**Requirements.** ``scale_prefetch`` without ``g2s_m0`` cannot be built, so ``v`` is undefined on
invalid sets. We use the *restricted game of a conjunctive permission structure* (Gilles, Owen &
van den Brink 1992, "Games with permission structures: the conjunctive approach", Int. J. Game
Theory 20:277-293): a switch whose requirements are not all on does nothing, i.e.
``v_r(S) = v(sigma(S))`` with ``sigma(S)`` the largest valid subset of ``S`` (repeatedly drop every
switch whose requirement is missing). Only valid sets are ever evaluated (compiled, modelled). Its
Shapley value is the *conjunctive permission value*: a required switch shares in what its dependents
buy (in the orderings where the dependent comes first, the dependent's gain lands on the switch that
enables it), and every switch nothing requires keeps the plain Shapley axioms. ``Structure.valid`` /
``Structure.sigma`` implement it.

* :func:`shapley_exact` -- the Shapley value of ``v_r`` over all ``2^n`` sets (``n`` <= 16 or so);
  needs ``v`` on every valid set (:meth:`Structure.subsets`).
* :func:`sample_orderings` / :func:`needed_sets` / :func:`shapley_sampled` -- permutation sampling
  (Castro, Gomez & Tejada 2009): uniform random orderings in antithetic pairs (an ordering and its
  reverse), the first pair seeded with the ladder order, so the ladder's own rungs are evaluated;
  the estimate keeps efficiency exactly (each ordering's marginals add up to the total); its sampling
  interval is a percentile bootstrap over the orderings.
* :func:`interactions_exact` -- the pairwise Shapley interaction index (Grabisch 1997,
  Fuzzy Sets Syst. 92:167-189): ``I_ij = sum_S |S|!(n-|S|-2)!/(n-1)! [v(S+ij) - v(S+i) - v(S+j) + v(S)]``
  over ``S`` without ``i, j``: how much ``i`` and ``j`` together buy beyond each alone, averaged over
  contexts -- the pairs that make orders disagree (``i``'s marginal when it comes after ``j`` minus
  before ``j`` is exactly ``I_ij`` in a game with pairwise terms only).
* :func:`interactions_sampled` -- the same from sampled orderings: conditional on ``i`` and ``j``
  being adjacent in a uniform ordering, the set before them is distributed exactly as the index's
  weights (uniform size 0..n-2, uniform set of that size), so the second difference at every adjacent
  pair is an unbiased sample; each needs one more set, the prefix with the later of the two alone
  (:func:`needed_sets` with ``interactions=True`` lists it).
* :func:`rank_correlation` -- Spearman's rho of a claimed order against values, with a bootstrap
  interval and a plain verdict (``agrees`` / ``disagrees`` / ``cannot decide``).

Everything takes values keyed by ``frozenset`` of switch names; the callers own what a value is.
"""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Sequence

#: How many sets an exact computation may need before the caller should sample instead.
EXACT_LIMIT = 4096


class GameError(ValueError):
    """A game is missing a value it needs, or is malformed (one clear line)."""


@dataclass(frozen=True)
class Structure:
    """Players (switches, in ladder order) and each one's direct requirements."""

    players: tuple[str, ...]
    requires: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def __post_init__(self):
        object.__setattr__(self, "players", tuple(self.players))
        req = {p: tuple(self.requires.get(p, ())) for p in self.players}
        bad = [f"{p} requires {r}" for p, rs in req.items() for r in rs if r not in self.players]
        if bad:
            raise GameError("unknown requirement: " + "; ".join(bad))
        if len(set(self.players)) != len(self.players):
            raise GameError("a player is listed twice")
        object.__setattr__(self, "requires", req)

    @classmethod
    def of_family(cls, fam) -> "Structure":
        """From a registered :class:`mxfp4_ablation.family.Family`."""
        return cls(tuple(fam.switches), {s.name: tuple(s.requires) for s in fam.switches.values()})

    @property
    def n(self) -> int:
        return len(self.players)

    def valid(self, s: Iterable[str]) -> bool:
        s = frozenset(s)
        return all(set(self.requires[p]) <= s for p in s)

    def sigma(self, s: Iterable[str]) -> frozenset:
        """The largest valid subset of ``s`` (switches whose requirements are missing do nothing)."""
        s = set(s)
        while True:
            drop = {p for p in s if not set(self.requires[p]) <= s}
            if not drop:
                return frozenset(s)
            s -= drop

    def subsets(self) -> list[frozenset]:
        """Every valid set, by size then ladder-order mask."""
        out = []
        for m in range(1 << self.n):
            s = frozenset(p for i, p in enumerate(self.players) if m >> i & 1)
            if self.valid(s):
                out.append((len(s), m, s))
        return [s for _, _, s in sorted(out, key=lambda t: (t[0], t[1]))]


def _value(struct: Structure, v: Mapping[frozenset, float], s) -> float:
    key = struct.sigma(s)
    try:
        return float(v[key])
    except KeyError:
        raise GameError(f"no value for the set {{{', '.join(p for p in struct.players if p in key)}}}") from None


def _memo(struct: Structure, v: Mapping[frozenset, float]):
    """``s -> v(sigma(s))``, each closed set looked up once."""
    cache: dict[frozenset, float] = {}

    def val(s):
        key = struct.sigma(s)
        if key not in cache:
            cache[key] = _value(struct, v, key)
        return cache[key]

    return val


def _subsets(items: Sequence[str]):
    """Every subset of ``items``, in bit order."""
    for m in range(1 << len(items)):
        yield frozenset(q for j, q in enumerate(items) if m >> j & 1)


def _weights(n: int) -> list[float]:
    """Shapley weight of a coalition of size k not holding the player: k!(n-k-1)!/n!."""
    return [math.factorial(k) * math.factorial(n - k - 1) / math.factorial(n) for k in range(n)]


def shapley_exact(struct: Structure, v: Mapping[frozenset, float]) -> dict[str, float]:
    """The Shapley value of the restricted game (module doc), every set enumerated."""
    n = struct.n
    if (1 << n) > 1 << 20:
        raise GameError(f"{n} players: too many sets to enumerate; sample instead")
    w = _weights(n)
    val = _memo(struct, v)
    out = {}
    for p in struct.players:
        total = 0.0
        for s in _subsets([q for q in struct.players if q != p]):
            total += w[len(s)] * (val(s | {p}) - val(s))
        out[p] = total
    return out


def interactions_exact(struct: Structure, v: Mapping[frozenset, float]) -> dict[tuple[str, str], float]:
    """The pairwise Shapley interaction index of the restricted game, for every pair (ladder order)."""
    n = struct.n
    if n < 2:
        return {}
    wk = [math.factorial(k) * math.factorial(n - k - 2) / math.factorial(n - 1) for k in range(n - 1)]
    val = _memo(struct, v)
    out = {}
    for a, b in itertools.combinations(struct.players, 2):
        total = 0.0
        for s in _subsets([q for q in struct.players if q not in (a, b)]):
            total += wk[len(s)] * (val(s | {a, b}) - val(s | {a}) - val(s | {b}) + val(s))
        out[(a, b)] = total
    return out


# ----------------------------------------------------------------------------------- sampling


def sample_orderings(struct: Structure, pairs: int, seed: int = 0) -> list[tuple[str, ...]]:
    """``2 * pairs`` orderings: antithetic pairs (an ordering, then its reverse); the first pair is the
    ladder order and its reverse, the rest uniform random (seeded, so a rerun asks for the same sets)."""
    if pairs < 1:
        raise GameError(f"need at least one pair of orderings, got {pairs}")
    rng = random.Random(seed)
    out = [struct.players, struct.players[::-1]]
    for _ in range(pairs - 1):
        o = list(struct.players)
        rng.shuffle(o)
        out += [tuple(o), tuple(o[::-1])]
    return out


def needed_sets(struct: Structure, orderings: Sequence[Sequence[str]], interactions: bool = False) -> list[frozenset]:
    """The valid sets the orderings visit (every prefix, restricted by :meth:`Structure.sigma`), plus,
    with ``interactions``, each adjacent pair's swapped prefix. First seen first."""
    seen: dict[frozenset, None] = {}
    for o in orderings:
        prefix: list[str] = []
        seen.setdefault(struct.sigma(prefix))
        for k, p in enumerate(o):
            if interactions and k + 1 < len(o):
                seen.setdefault(struct.sigma(prefix + [o[k + 1]]))
            prefix.append(p)
            seen.setdefault(struct.sigma(prefix))
    return list(seen)


def marginals(struct: Structure, v: Mapping[frozenset, float], ordering: Sequence[str]) -> dict[str, float]:
    """Each player's marginal contribution along one ordering (they add up to v(all) - v(none))."""
    out, prefix = {}, []
    before = _value(struct, v, prefix)
    for p in ordering:
        prefix.append(p)
        after = _value(struct, v, prefix)
        out[p] = after - before
        before = after
    return out


def _percentile(xs: Sequence[float], q: float) -> float:
    xs = sorted(xs)
    if not xs:
        return float("nan")
    pos = q * (len(xs) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


@dataclass
class Sampled:
    """A sampled Shapley estimate: ``values`` (mean marginal), ``ci`` (percentile bootstrap over
    orderings, ``level``), ``per_ordering`` (each ordering's marginals)."""

    values: dict[str, float]
    ci: dict[str, tuple[float, float]]
    per_ordering: list[dict[str, float]]
    level: float


def shapley_sampled(struct: Structure, v: Mapping[frozenset, float], orderings: Sequence[Sequence[str]],
                    level: float = 0.95, resamples: int = 2000, seed: int = 0) -> Sampled:
    """Mean marginal over ``orderings`` with a bootstrap interval (antithetic pairs resampled as units)."""
    rows = [marginals(struct, v, o) for o in orderings]
    values = {p: sum(r[p] for r in rows) / len(rows) for p in struct.players}
    units = [rows[i:i + 2] for i in range(0, len(rows), 2)]  # antithetic pairs stay together
    rng = random.Random(seed)
    boots: dict[str, list[float]] = {p: [] for p in struct.players}
    if len(units) > 1:
        for _ in range(resamples):
            pick = [r for _ in units for r in units[rng.randrange(len(units))]]
            for p in struct.players:
                boots[p].append(sum(r[p] for r in pick) / len(pick))
    a = (1 - level) / 2
    ci = {p: ((_percentile(boots[p], a), _percentile(boots[p], 1 - a)) if boots[p] else (float("nan"), float("nan")))
          for p in struct.players}
    return Sampled(values, ci, rows, level)


def interactions_sampled(struct: Structure, v: Mapping[frozenset, float], orderings: Sequence[Sequence[str]]
                         ) -> dict[tuple[str, str], tuple[float, int]]:
    """``(estimate, samples)`` per pair (ladder order) from the orderings' adjacent pairs (module doc);
    a pair never adjacent gets ``(nan, 0)``."""
    acc: dict[tuple[str, str], list[float]] = {pair: [] for pair in itertools.combinations(struct.players, 2)}
    order = {p: i for i, p in enumerate(struct.players)}
    for o in orderings:
        for k in range(len(o) - 1):
            s, a, b = list(o[:k]), o[k], o[k + 1]
            d = (_value(struct, v, s + [a, b]) - _value(struct, v, s + [a]) - _value(struct, v, s + [b])
                 + _value(struct, v, s))
            acc[tuple(sorted((a, b), key=order.get))].append(d)
    return {pair: ((sum(xs) / len(xs), len(xs)) if xs else (float("nan"), 0)) for pair, xs in acc.items()}


# ----------------------------------------------------------------------------------- order of impact


def _ranks(xs: Sequence[float]) -> list[float]:
    """Average ranks (1 = smallest)."""
    idx = sorted(range(len(xs)), key=lambda i: xs[i])
    ranks = [0.0] * len(xs)
    i = 0
    while i < len(idx):
        j = i
        while j + 1 < len(idx) and xs[idx[j + 1]] == xs[idx[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[idx[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman's rho with average ranks; NaN for fewer than two pairs or a constant side."""
    if len(a) < 2 or len(a) != len(b):
        return float("nan")
    ra, rb = _ranks(a), _ranks(b)
    ma, mb = sum(ra) / len(ra), sum(rb) / len(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    va, vb = sum((x - ma) ** 2 for x in ra), sum((y - mb) ** 2 for y in rb)
    return float("nan") if va == 0 or vb == 0 else cov / math.sqrt(va * vb)


def rank_correlation(claimed: Sequence[str], draw: Callable[[random.Random | None], Mapping[str, float]],
                     resamples: int = 2000, level: float = 0.95, seed: int = 0) -> dict:
    """Spearman's rho between a claimed descending order of impact and values (``draw(None)``: the
    point estimate; ``draw(rng)``: one bootstrap draw of every value, e.g. resampled orderings plus a
    draw of the model's error), with a percentile interval and a verdict: ``agrees`` (interval above
    0), ``disagrees`` (below 0) or ``cannot decide`` (it holds 0, or fewer than 3 ranked switches)."""
    claimed = list(claimed)
    n = len(claimed)
    claim_score = [float(n - i) for i in range(n)]  # first listed = largest impact
    point = draw(None)
    rho = spearman(claim_score, [point[s] for s in claimed]) if n >= 2 else float("nan")
    rng = random.Random(seed)
    rhos = []
    if n >= 2:
        for _ in range(resamples):
            d = draw(rng)
            r = spearman(claim_score, [d[s] for s in claimed])
            if r == r:
                rhos.append(r)
    a = (1 - level) / 2
    lo, hi = (_percentile(rhos, a), _percentile(rhos, 1 - a)) if rhos else (float("nan"), float("nan"))
    if n < 3:
        verdict = f"cannot decide: {n} ranked switch{'es' if n != 1 else ''} (a rank correlation needs 3 or more)"
    elif lo > 0:
        verdict = "agrees"
    elif hi < 0:
        verdict = "disagrees"
    else:
        verdict = f"cannot decide: the {int(level * 100)} % interval [{lo:.2f}, {hi:.2f}] holds 0"
    return {"claimed": claimed, "rho": rho, "ci": [lo, hi], "n": n, "verdict": verdict, "level": level,
            "resamples": len(rhos)}


__all__ = ["EXACT_LIMIT", "GameError", "Structure", "shapley_exact", "interactions_exact", "sample_orderings",
           "needed_sets", "marginals", "Sampled", "shapley_sampled", "interactions_sampled", "spearman",
           "rank_correlation"]
