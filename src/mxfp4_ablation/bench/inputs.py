"""Sizing of rotating input sets, so that no timed launch is served from the last-level cache.

A kernel timed over and over on one set of buffers finds its operands in the cache from
the second launch on and looks faster than it will be in a real model, where the
operands come from device memory.  The harness therefore gives every arm of a
comparison several input sets and walks through them launch by launch; the sets
together must be larger than the last-level cache (by ``factor``, 2x by default) so
that each set has been evicted by the time it comes round again.

The cache size comes from the device (``device_info.llc_bytes``) or an override.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

#: Default margin: all sets together are at least this many times the cache.
DEFAULT_FACTOR = 2.0
#: Even a set larger than the cache gets a second one: launch i then never reuses
#: the buffers of launch i-1, whose tail may still sit in the cache.
DEFAULT_MIN_SETS = 2
#: Upper bound, so a tiny problem on a huge cache does not allocate thousands of sets.
DEFAULT_MAX_SETS = 512


class RotationError(ValueError):
    """Input sets cannot be sized as asked (bad sizes, or too many sets needed)."""


@dataclass(frozen=True)
class Rotation:
    """How many input sets an arm uses and how large they are together."""

    n_sets: int
    set_bytes: int
    cache_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.n_sets * self.set_bytes

    @property
    def cache_multiple(self) -> float:
        """Total bytes of all sets over the cache size (>= factor when sized by rotation_for)."""
        return self.total_bytes / self.cache_bytes if self.cache_bytes else math.inf


def sets_needed(
    set_bytes: int,
    cache_bytes: int,
    factor: float = DEFAULT_FACTOR,
    min_sets: int = DEFAULT_MIN_SETS,
    max_sets: int = DEFAULT_MAX_SETS,
) -> int:
    """Smallest number of sets of ``set_bytes`` whose total is >= ``factor * cache_bytes``.

    ``set_bytes`` counts every buffer one launch touches (inputs, scales, outputs).
    """
    if set_bytes <= 0:
        raise RotationError(f"an input set must have a positive size, got {set_bytes} bytes")
    if cache_bytes < 0:
        raise RotationError(f"cache size must be >= 0, got {cache_bytes} bytes")
    if factor <= 0:
        raise RotationError(f"rotation factor must be > 0, got {factor}")
    if min_sets < 1 or max_sets < min_sets:
        raise RotationError(f"need 1 <= min_sets <= max_sets, got {min_sets}, {max_sets}")
    n = max(min_sets, math.ceil(factor * cache_bytes / set_bytes))
    if n > max_sets:
        raise RotationError(
            f"{n} input sets of {set_bytes} B are needed to exceed {factor:g} x {cache_bytes} B "
            f"of cache, more than the limit of {max_sets}; use a larger problem or raise max_sets"
        )
    return n


def rotation_for(
    set_bytes: int,
    cache_bytes: int,
    factor: float = DEFAULT_FACTOR,
    min_sets: int = DEFAULT_MIN_SETS,
    max_sets: int = DEFAULT_MAX_SETS,
) -> Rotation:
    """A :class:`Rotation` sized by :func:`sets_needed`."""
    n = sets_needed(set_bytes, cache_bytes, factor, min_sets, max_sets)
    return Rotation(n_sets=n, set_bytes=int(set_bytes), cache_bytes=int(cache_bytes))


def single_set(set_bytes: int, cache_bytes: int) -> Rotation:
    """One set only: the deliberately cache-hot configuration (used to show the cache effect)."""
    if set_bytes <= 0:
        raise RotationError(f"an input set must have a positive size, got {set_bytes} bytes")
    return Rotation(n_sets=1, set_bytes=int(set_bytes), cache_bytes=int(cache_bytes))
