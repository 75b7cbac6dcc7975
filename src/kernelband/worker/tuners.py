"""What the module's autotuners chose: the configuration each `triton.autotune` kernel picked for each key
it met, with the times of the configurations it tried where Triton keeps them.

Triton's `Autotuner` keeps `cache` ({key: Config}) and, after a tuning, `configs_timings` ({Config: time})
for the last key it tuned only: a snapshot before one call and a look after it tells which keys that call
met first. Attributes are read defensively: their names have held from Triton 3.0 to 3.9, but nothing
promises them, and a module that does not use them must not fail the evaluation.
"""

from __future__ import annotations

import math

# The autotuner may hide under @triton.heuristics (its `.fn`): followed this many levels deep.
_WRAPPED = 3


def autotuners(module) -> dict[str, object]:
    """The module's top-level names bound to a Triton Autotuner (or to a wrapper of one)."""
    try:
        from triton.runtime.autotuner import Autotuner
    except ImportError:
        return {}
    found = {}
    for name, value in list(vars(module).items()):
        for _ in range(_WRAPPED):
            if isinstance(value, Autotuner):
                found[name] = value
                break
            value = getattr(value, "fn", None)
            if value is None:
                break
    return found


def snapshot(module) -> dict[str, tuple[set, int]]:
    """Per autotuner: the keys it has chosen for, and the identity of its last timings."""
    return {name: (set(_cache(t)), id(getattr(t, "configs_timings", None))) for name, t in autotuners(module).items()}


def choices_since(module, before: dict[str, tuple[set, int]]) -> list[dict]:
    """The keys each autotuner chose a configuration for since `before` (`snapshot`), as plain records:
    {"kernel", "key", "exact", "chosen", "timings"}. `timings` is filled for the last key a tuner tuned since
    then, when its timings are new (Triton keeps those of its last tuning only)."""
    found = []
    for name, tuner in autotuners(module).items():
        seen, timings_id = before.get(name, (set(), None))
        cache = _cache(tuner)
        new = [key for key in cache if key not in seen]
        timings = getattr(tuner, "configs_timings", None)
        fresh = isinstance(timings, dict) and id(timings) != timings_id
        for i, key in enumerate(new):
            record = {"kernel": name, "key": [_plain(v) for v in key], "exact": all(_exact(v) for v in key),
                      "chosen": config_record(cache[key]), "timings": []}
            if fresh and i == len(new) - 1:
                record["timings"] = [{**config_record(c), "ms": _ms(t)} for c, t in timings.items()]
            found.append(record)
    return found


def config_record(config) -> dict:
    """A triton.Config as plain values: its constexprs and its launch options."""
    kwargs = getattr(config, "kwargs", None) or {}
    return {"kwargs": {str(k): _plain(v) for k, v in dict(kwargs).items()},
            "num_warps": _int(getattr(config, "num_warps", None)),
            "num_stages": _int(getattr(config, "num_stages", None)),
            "num_ctas": _int(getattr(config, "num_ctas", None)),
            "maxnreg": _int(getattr(config, "maxnreg", None)),
            "pre_hook": getattr(config, "pre_hook", None) is not None}


def _cache(tuner) -> dict:
    cache = getattr(tuner, "cache", None)
    return dict(cache) if isinstance(cache, dict) else {}


def _exact(value) -> bool:
    return value is None or isinstance(value, bool | int | float | str)


def _plain(value):
    """A key element or constexpr as JSON holds it; anything else as its text."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value if _exact(value) else str(value)


def _int(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _ms(timing) -> float | None:
    """Triton's time for a config: a float, or [median, p20, p80] (do_bench's quantiles)."""
    if isinstance(timing, list | tuple):
        timing = timing[0] if timing else None
    try:
        value = float(timing)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None
