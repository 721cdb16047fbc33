"""Cache residency of a kernel record: the rule the measuring code applies, and what a reader assumes for records
that predate it.

A record made since issue #28 says where its data lived (``metrics.cache_resident``: ``L2``, ``LLC`` or ``none``)
from its working set (``metrics.working_set_bytes``: the case's minimal bytes, the same volume its same-size copy
reference moves) and the machine's cache sizes (``metrics.cache_bytes``). Only a record that is not cache-resident is
ranked against the DRAM copy ceiling; the others are ranked against their same-size copy
(``metrics.pct_of_same_size_copy``).

Records without the field (older ones) get, in a reader's memory (:func:`record_residency`):

1. the same rule, with the cache sizes that newer records of the **same hardware id** recorded (``derived``);
2. else ``unknown``: treated as cache-resident (kept out of the DRAM ranking) only where clearly cache-sized: a
   ``quick`` shape-class case timed without a flush. The project has said since its first sweep that the quick shapes
   (working sets of 0.5-20 MiB) fit a CPU's caches, and on both CPUs with committed records quick cases exceeded the
   DRAM ceiling. Other unknown records stay in the DRAM ranking, as before.
"""

from __future__ import annotations

#: Cache levels a record can name; ``none``: the working set fits no cache (or the cache was flushed before it).
RESIDENCIES = ("L2", "LLC", "none")


def residency(working_set: int, caches: dict, *, device: str = "cpu", timing: str = "hot", pass_: str = "fwd",
              threads: int = 1) -> str | None:
    """Where a case's data lives while it is timed: ``"L2"``, ``"LLC"``, ``"none"``, or ``None`` (unknown).

    * Cold GPU timing flushes L2 before every repetition, so a single pass (``fwd``, ``bwd``) reads from HBM:
      ``none``. ``fwd+bwd`` can re-read in the backward what the forward left in L2, so it is judged by size.
    * Otherwise by size: ``L2`` when the working set fits the L2 the timing can use (on a CPU one L2 per thread; on
      a GPU the one L2), else ``LLC`` when it fits the last-level cache, else ``none``. On a GPU the L2 is the
      last-level cache, so a GPU case is ``L2`` or ``none``.
    * ``None`` when the cache sizes are unknown.
    """
    is_cuda = str(device).startswith("cuda")
    if is_cuda and timing == "cold" and pass_ != "fwd+bwd":
        return "none"
    l2, llc = caches.get("l2_bytes"), caches.get("llc_bytes")
    if not l2 and not llc:
        return None
    if l2:
        usable = l2 if is_cuda else l2 * max(1, int(threads or 1))
        if working_set <= (min(usable, llc) if llc else usable):
            return "L2"
    if llc and not is_cuda and working_set <= llc:
        return "LLC"
    return "none"


def _int(v) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def known_caches(records) -> dict[str, dict]:
    """``{hardware_id: cache_bytes}`` from the records that recorded their machine's cache sizes (the newest wins)."""
    out: dict[str, tuple[str, dict]] = {}
    for rec in records:
        met = rec.get("metrics") if isinstance(rec, dict) else None
        caches = met.get("cache_bytes") if isinstance(met, dict) else None
        if not isinstance(caches, dict) or not (_int(caches.get("l2_bytes")) or _int(caches.get("llc_bytes"))):
            continue
        prov = rec.get("provenance") or {}
        hw, ts = prov.get("hardware_id"), str(prov.get("timestamp") or "")
        if isinstance(hw, str) and (hw not in out or ts >= out[hw][0]):
            out[hw] = (ts, {"l2_bytes": _int(caches.get("l2_bytes")), "llc_bytes": _int(caches.get("llc_bytes"))})
    return {hw: c for hw, (_, c) in out.items()}


def record_residency(rec: dict, known: dict[str, dict] | None = None) -> tuple[str | None, str]:
    """(residency, how) of a kernel record: ``how`` is ``recorded`` (its own field), ``derived`` (the rule with its
    hardware's cache sizes from ``known``, see :func:`known_caches`), ``assumed`` (unknown sizes, clearly
    cache-sized: residency ``"LLC"``) or ``unknown`` (residency ``None``)."""
    met, cfg = rec.get("metrics") or {}, rec.get("config") or {}
    own = met.get("cache_resident")
    if own in RESIDENCIES:
        return own, "recorded"
    device, timing, pass_ = str(cfg.get("device") or "cpu"), str(cfg.get("timing") or "hot"), str(cfg.get("pass"))
    ws = _int(met.get("working_set_bytes")) or _int(met.get("bytes_moved"))
    hw = (rec.get("provenance") or {}).get("hardware_id")
    caches = (known or {}).get(hw) if isinstance(hw, str) else None
    if ws is not None and caches:
        got = residency(ws, caches, device=device, timing=timing, pass_=pass_, threads=_int(cfg.get("threads")) or 1)
        if got is not None:
            return got, "derived"
    if device.startswith("cuda") and timing == "cold" and pass_ != "fwd+bwd":
        return "none", "derived"
    if cfg.get("shape_class") == "quick":
        return "LLC", "assumed"
    return None, "unknown"


def ranked_against_dram(residency_: str | None) -> bool:
    """Whether a record with this residency may be ranked against the DRAM copy ceiling: not cache-resident, or
    unknown (older records that are not clearly cache-sized)."""
    return residency_ in ("none", None)
