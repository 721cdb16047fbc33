"""The GPU campaign: a tiered, resumable kernel sweep for a fresh GPU machine, packed to travel back in a few files.

Made for a GPU machine lent for short sessions whose image has torch, Triton, pandas and pytest-benchmark but not
normbench's extras (``scripts/gpu-campaign.sh`` runs this with the image's python and ``PYTHONPATH=.``):

* tier 1: LayerNorm, RMSNorm, DyT, add+RMSNorm x LLM widths 1024..16384 (4096 tokens, plus 8192x4096) x bfloat16 x
  fwd/bwd/fwd+bwd x eager/compile/triton (+ liger where importable): planned to fit one session (``--budget-s``);
* tier 2: the rest of the zoo on the same LLM shapes and the vision shapes, and float32 for everything;
* tier 3: ASV's small grid through the measurement core, and the GPU kernel tests (``tests/test_triton_kernels.py``
  compiled, not interpreted);
* tier 4, "models" (``--tier models``; ``all`` runs it right after tier 1): the catalog LLMs' norm sites at their
  prefill and decode shapes (``normbench.catalog``), bfloat16, fwd and fwd+bwd, every backend that runs there, timed
  head to head (interleaved and paired, ``normbench.measure.headtohead``).

Resumable: records already measured (passed back in with ``--resume``) are skipped, and a run stops starting new
groups before ``--budget-s`` runs out, so a tier too big for one session continues in the next. Everything measured
is packed, after every group (a hard kill loses only the group it cut short), into at most ``MAX_FILES`` gzipped JSON
files of at most ``MAX_FILE_BYTES`` each under ``--out`` (default: ``$OUT`` where set, the folder a remote runner
sends back), plus a log with per-group wall times that calibrates :func:`estimate`.
``--dry-run`` plans the GPU cases on any machine and prints counts and estimated minutes per tier.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from normbench.measure.timers import SPIN_FACTOR

TIER1_NORMS = ("layernorm", "rmsnorm", "dyt", "add_rmsnorm")
#: tokens x hidden: every LLM width at 4096 tokens, and one 8192 x 4096 shape (a Llama-7B step's worth of rows)
TIER1_SHAPES = ("llm-4096x1024", "llm-4096x2048", "llm-4096x4096", "llm-4096x8192", "llm-4096x16384",
                "llm-8192x4096")
TIER1_BACKENDS = ("eager", "compile", "triton", "liger")
PASSES = ("fwd", "bwd", "fwd+bwd")
#: what comes back from the GPU machine: at most 8 files of at most 16 MiB (the log is one of them)
MAX_FILES = 8
MAX_FILE_BYTES = 16 * 2**20
RECORD_FILES = MAX_FILES - 2  # leaves room for the log and the GPU tests' output
DEFAULT_BUDGET_S = 540.0      # of a 600 s session: start-up, packing and the transfer need the rest

#: The campaign's repetitions: enough for a median and IQR on a GPU, few enough for tier 1 to fit one session.
#: (Recorded in every record: metrics.reps.)
CAMPAIGN_SETTINGS = dict(warmup=10, min_reps=20, max_reps=200, min_time=0.1, max_time=5.0)


# --- planning -----------------------------------------------------------------------------------------------------

@dataclass
class Tier:
    number: int
    title: str
    cases: list = field(default_factory=list)
    optional: dict = field(default_factory=dict)  # backend -> cases that run only where it imports
    commands: list = field(default_factory=list)  # extra steps (tier 3)


def _cases(norms, shapes, dtypes, backends, device, modes=None):
    """Cases without touching the device (planning works on a CPU): the core's ``plan`` minus its device check."""
    from normbench.discovery import REGISTRY
    from normbench.measure import baselines
    from normbench.measure.planning import MODES, Case, backends_for
    from normbench.measure.shapes import parse_shape

    out = []
    for name in norms:
        spec = REGISTRY.get(name)
        avail = backends_for(spec)
        for label in shapes:
            shape = parse_shape(label)  # a grid label or a free-form shape (140x4096, images:NxCxHxW)
            if shape.layout not in spec.layouts or (shape.shape_class == "softmax") != (spec.kind == "softmax"):
                continue
            for backend in backends:
                if backend not in avail:
                    continue
                base = baselines.REGISTRY.get((backend, name))  # None: the norm's own backend, or softmax's
                if base is not None and shape.layout not in base.layouts:
                    continue
                for dtype in dtypes:
                    if base is not None and dtype not in base.dtypes:
                        continue
                    for mode in ((modes or MODES) if spec.running_state else ("train",)):
                        for p in (("fwd",) if base is not None and base.forward_only else PASSES):
                            out.append(Case(name, backend, shape, dtype, p, device, "cold", 1, False, "campaign",
                                            mode))
    return out


def _importable(backend: str, norm: str, device: str) -> bool:
    from normbench.measure import baselines

    return baselines.unavailable(backend, norm, "tokens", device) is None


def plan_tiers(device: str = "cuda") -> list[Tier]:
    """The three tiers' cases (baseline cases split out as optional: they run only where their library imports)."""
    from normbench.discovery import REGISTRY
    from normbench.measure import baselines
    from normbench.measure.shapes import vision_shapes

    t1 = Tier(1, "LN/RMSNorm/DyT/add+RMSNorm x LLM widths x bf16 x 3 passes x eager/compile/triton (+liger)")
    for c in _cases(TIER1_NORMS, TIER1_SHAPES, ("bfloat16",), TIER1_BACKENDS, device):
        (t1.optional.setdefault(c.backend, []) if c.backend in baselines.BASELINES else t1.cases).append(c)
    rest = [n for n in REGISTRY.names() if n not in TIER1_NORMS]
    from normbench.measure.shapes import softmax_shapes

    shapes2 = TIER1_SHAPES + tuple(s.label for s in vision_shapes() + softmax_shapes())
    all_backends = ("eager", "compile", "triton") + baselines.BASELINES
    t2 = Tier(2, "the rest of the zoo (LLM + vision shapes, bf16 + fp32), and float32 for tier 1's norms")
    for c in (_cases(rest, shapes2, ("bfloat16", "float32"), all_backends, device)
              + _cases(TIER1_NORMS, TIER1_SHAPES, ("float32",), all_backends, device)
              + _cases(TIER1_NORMS, TIER1_SHAPES, ("bfloat16",), tuple(b for b in baselines.BASELINES
                                                                      if b != "liger"), device)):
        (t2.optional.setdefault(c.backend, []) if c.backend in baselines.BASELINES else t2.cases).append(c)
    t3 = Tier(3, "ASV's small grid through the core, and the GPU kernel tests (compiled Triton)")
    from normbench.measure import suite

    grid = suite.grid("small")
    for norm in grid[0]:
        t3.cases += [c for c in _cases((norm,), grid[2], grid[3], grid[1], device) if c.pass_ in grid[4]]
    t3.commands.append(["pytest", "-q", "-p", "no:cacheprovider", "tests/test_triton_kernels.py"])
    t4 = Tier(MODELS_TIER, "models: the catalog LLMs' sites at prefill and decode shapes x bf16 x fwd, fwd+bwd x "
                           "every backend, head to head")
    for norm, labels in model_shapes().items():
        for c in _cases((norm,), labels, ("bfloat16",), all_backends, device):
            if c.pass_ == "bwd":
                continue
            (t4.optional.setdefault(c.backend, []) if c.backend in baselines.BASELINES else t4.cases).append(c)
    return [t1, t2, t3, t4]


#: The models tier's number (it runs right after tier 1 in ``--tier all``).
MODELS_TIER = 4


def model_shapes() -> dict[str, list[str]]:
    """norm -> the shape labels of every catalog LLM's sites that norm computes, in every regime."""
    from normbench import catalog
    from normbench.measure.shapes import shape_from_dims

    out: dict[str, list[str]] = {}
    for m in catalog.models():
        if m.family != "llm":
            continue
        for ss in catalog.site_shapes(m):
            label = shape_from_dims(ss.layout, ss.dims).label
            if label not in out.setdefault(ss.norm, []):
                out[ss.norm].append(label)
    return out


# --- cost model ---------------------------------------------------------------------------------------------------

#: Seconds to build, compile or autotune, and check one group (module x shape x dtype), by backend. Guesses from
#: CPU runs and the libraries' own timings, to be replaced by the log's measured wall times after a GPU run.
SETUP_S = {"eager": 1.0, "compile": 8.0, "triton": 4.0}
SETUP_BASELINE_S = 3.0
#: Bandwidth a memory-bound kernel is assumed to reach (bytes/s), host overhead per repetition (launch, event
#: records, the L2 flush of >= 256 MiB), and fixed cost per case (peak memory, record).
ASSUMED_BW = 2.0e12
REP_OVERHEAD_S = 2.5e-4
CASE_OVERHEAD_S = 0.2
CEILING_S = 3.0
#: ``normbench check`` of each norm before it is measured (its backends compiled and compared with eager).
CHECK_S = 10.0
#: Keep-ahead (on by default on CUDA, ``measure.timers.KeepAhead``) queues a spin before each batch lasting
#: ``SPIN_FACTOR`` times the host's enqueue time of a batch, while the host enqueues it: each repetition costs that
#: much GPU time on top of its own work. The host's time per repetition is taken as ``REP_OVERHEAD_S``.
SPIN_PER_REP_S = SPIN_FACTOR * REP_OVERHEAD_S


def _case_bytes(case) -> int:
    from normbench.discovery import REGISTRY
    from normbench.measure.shapes import input_shape

    spec = REGISTRY.get(case.norm)
    n = 1
    for d in input_shape(case.shape, spec.kind):
        n *= d
    e = 4 if case.dtype == "float32" else 2
    k = 2 if spec.kind in ("residual", "attention") else 1
    fwd, bwd = 2 * k * e * n, 3 * k * e * n
    return {"fwd": fwd, "bwd": bwd, "fwd+bwd": fwd + bwd}[case.pass_]


def estimate(cases, settings: dict | None = None) -> float:
    """Estimated seconds to measure ``cases`` on a GPU (setup per group + repetitions per case, each with its share
    of the keep-ahead spin unless ``settings`` has ``keep_ahead=False``)."""
    s = dict(CAMPAIGN_SETTINGS, **(settings or {}))
    groups = {}
    total = 0.0
    for c in cases:
        groups.setdefault(c.group, c.backend)
        t = _case_bytes(c) / ASSUMED_BW
        reps = min(s["max_reps"], max(s["min_reps"], int(s["min_time"] / max(t, 1e-7))))
        per_rep = t + REP_OVERHEAD_S + (_case_bytes(c) / ASSUMED_BW / 2 if c.pass_ == "bwd" else 0.0)
        if s.get("keep_ahead", True):
            per_rep += SPIN_PER_REP_S
        total += (reps + s["warmup"]) * per_rep + CASE_OVERHEAD_S
    for backend in groups.values():
        total += SETUP_S.get(backend, SETUP_BASELINE_S)
    return total + (CEILING_S + CHECK_S * len({c.norm for c in cases}) if cases else 0.0)


def dry_run(device: str = "cuda", out=None) -> dict:
    """Plan every tier without a GPU; print and return counts and estimated minutes."""
    out = out or sys.stdout
    summary = {}
    for tier in plan_tiers(device):
        opt = {b: len(v) for b, v in tier.optional.items()}
        est = estimate(tier.cases)
        est_opt = {b: estimate(v) - CEILING_S - CHECK_S * len({c.norm for c in v}) for b, v in tier.optional.items()}
        summary[tier.number] = {"title": tier.title, "cases": len(tier.cases), "optional_cases": opt,
                                "groups": len({c.group for c in tier.cases}), "estimated_s": round(est, 1),
                                "estimated_optional_s": {b: round(v, 1) for b, v in est_opt.items()},
                                "commands": [" ".join(c) for c in tier.commands]}
        print(f"tier {tier.number}: {tier.title}", file=out)
        print(f"  {len(tier.cases)} cases in {summary[tier.number]['groups']} groups, "
              f"~{est / 60:.1f} min", file=out)
        for b, n in opt.items():
            print(f"  + {n} {b} cases where {b} imports, ~{est_opt[b] / 60:.1f} min", file=out)
        for cmd in tier.commands:
            print(f"  + {' '.join(cmd)}", file=out)
    return summary


# --- packing ------------------------------------------------------------------------------------------------------

def pack(records: list[dict], out_dir, prefix: str = "records", max_files: int = RECORD_FILES,
         max_bytes: int = MAX_FILE_BYTES) -> list[Path]:
    """Write ``records`` as gzipped JSON arrays ``<prefix>-<i>.json.gz`` in ``out_dir``: at most ``max_files``
    files of at most ``max_bytes`` each. Raises ``ValueError`` when they do not fit (nothing is dropped quietly)."""
    from normbench.records.store import atomic_write_bytes

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    chunks = [records] if records else []
    while True:
        blobs = [gzip.compress(json.dumps(c, separators=(",", ":")).encode(), mtime=0) for c in chunks]
        big = [i for i, b in enumerate(blobs) if len(b) > max_bytes]
        if not big:
            break
        i = big[0]
        if len(chunks[i]) == 1:
            raise ValueError("one record is larger than a packed file may be")
        half = len(chunks[i]) // 2
        chunks[i:i + 1] = [chunks[i][:half], chunks[i][half:]]
    if len(blobs) > max_files:
        raise ValueError(f"{len(records)} records need {len(blobs)} files of {max_bytes} bytes; at most {max_files} "
                         "may come back: run fewer tiers per session")
    paths = []
    for i, blob in enumerate(blobs):
        p = out_dir / f"{prefix}-{i}.json.gz"
        atomic_write_bytes(p, blob)  # tmp + os.replace: an interruption leaves the old file or the new, whole
        paths.append(p)
    for old in set(out_dir.glob(f"{prefix}-*.json.gz")) - set(paths):  # after: a stop above loses no record
        old.unlink()
    return paths


def unpack(paths) -> list[dict]:
    """Records from packed files (or directories of them), each validated as the store validates records."""
    from normbench.records.schema import validate_record

    files = []
    for p in map(Path, paths):
        files += sorted(p.glob("*.json.gz")) if p.is_dir() else [p]
    out = []
    for f in files:
        try:
            data = json.loads(gzip.decompress(f.read_bytes()))
        except (OSError, ValueError) as exc:
            raise ValueError(f"{f}: not a packed record file ({exc})") from None
        for i, rec in enumerate(data):
            problems = validate_record(rec)
            if problems:
                raise ValueError(f"{f}: record {i} is invalid: {'; '.join(problems)}")
            out.append(rec)
    return out


# --- running ------------------------------------------------------------------------------------------------------

def smoke_cases(cases) -> list:
    """One case per backend (its forward at its smallest shape, first norm first): measured before anything else,
    so that a campaign that cannot measure stops within a minute and says why."""
    out: dict[str, object] = {}
    for c in sorted(cases, key=lambda c: (c.shape.numel, c.pass_ != "fwd")):
        out.setdefault(c.backend, c)
    return list(out.values())


def _gate(cases, log) -> tuple[list, list[dict], dict, list[dict]]:
    """The check gate on ``cases``: each backend on the device it runs on (the baselines too). Returns the cases it
    lets through, one entry per refused (norm, backend, device) (each printed with its reason), the verdicts, and
    the (norm, backend) pairs left out as not available here (printed too)."""
    from normbench.check import device_kind, ensure_checked, refusal
    from normbench.measure.baselines import GATE

    verdicts = ensure_checked([(c.norm, c.backend, c.device) for c in cases], provider=GATE, log=log)
    refused: dict[tuple, dict] = {}
    for c in cases:
        key = (c.norm, c.backend, device_kind(c.device))
        if key not in refused and verdicts[c.norm].refused(c.backend, c.device):
            v = verdicts[c.norm].verdict(c.backend, c.device)
            refused[key] = {"norm": c.norm, "backend": c.backend, "device": key[2], "status": v.status,
                            "detail": v.detail, "contract": v.of_contract, "message": refusal(v, "measure")}
    for msg in dict.fromkeys(r["message"] for r in refused.values()):
        log(f"REFUSED: {msg}")
    absent: dict[tuple, str] = {}
    for c in cases:
        v = verdicts[c.norm].verdict(c.backend, c.device)
        if v.status == "unavailable" and (c.norm, c.backend) not in absent:
            absent[(c.norm, c.backend)] = v.detail
            log(f"left out: {c.norm}/{c.backend} on {device_kind(c.device)}: {v.detail}")
    kept = [c for c in cases if (c.norm, c.backend, device_kind(c.device)) not in refused
            and (c.norm, c.backend) not in absent]
    left_out = [{"norm": n, "backend": b, "detail": d} for (n, b), d in absent.items()]
    return kept, list(refused.values()), verdicts, left_out


def _skip_reasons(s) -> dict[str, int]:
    reasons: dict[str, int] = {}
    for _, why in s.skipped:
        reasons[why] = reasons.get(why, 0) + 1
    return reasons


def _summary(s, cases, refused, t0, est, left_out=()) -> dict:
    reasons = _skip_reasons(s)
    return {"planned": len(cases), "written": s.written, "already_done": s.already_done, "skipped": len(s.skipped),
            "skip_reasons": reasons, "failed": s.failed[:50], "failed_count": len(s.failed),
            "refused": refused, "refused_norms": sorted({r["norm"] for r in refused if r["contract"]}),
            "left_out": list(left_out),
            "wall_s": round(time.monotonic() - t0, 1), "out_of_time": s.out_of_time, "estimated_s": est}


def run(tiers=(1,), out="campaign-out", work=None, resume=(), budget_s: float = DEFAULT_BUDGET_S,
        commit: str | None = None, log=None, smoke: bool = True, device: str = "cuda", plan=None,
        settings=None, on_group=None) -> dict:
    """Measure the chosen tiers until done or out of budget; pack what exists under ``out``; return the log.

    Loud: every refusal is printed with its reason and kept in the log, and the log's ``problems`` (what makes
    :func:`command` exit non-zero) name each refused norm or backend, each tier with failed cases and each tier that
    wrote nothing. ``smoke`` first measures :func:`smoke_cases` of tier 1 and stops at once if that writes nothing.
    ``device``, ``plan`` (``{tier number: Tier}``) and ``settings`` (a ``TimerSettings``) are for tests: the
    campaign can be driven on a CPU with a tiny tier.

    Packed as it goes (issue #48): after each group (a set, in a head-to-head tier) the records measured so far are
    packed under ``out`` and the log written, both atomically, so a call killed at any second (SIGKILL included)
    leaves every finished group's records there, and ``resume=[out]`` goes on from them. ``on_group(entry)`` is
    called after each such checkpoint (the GPU window's report)."""
    from normbench.records.provenance import GIT_COMMIT_ENV

    if commit:
        os.environ[GIT_COMMIT_ENV] = commit
    t_start = time.monotonic()
    deadline = t_start + budget_s
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    import torch

    from normbench import device as seam
    from normbench.check import stamp
    from normbench.measure.sweep import run_sweep
    from normbench.measure.timers import TimerSettings
    from normbench.records.store import write_records

    if device.startswith("cuda") and not seam.available():
        raise SystemExit("normbench campaign needs a CUDA device (use --dry-run to plan on this machine)")
    # The working results tree stays outside ``out``: only the packed files and the log may come back.
    work = Path(work or os.environ.get("NORMBENCH_CAMPAIGN_WORK") or "/tmp/normbench-campaign-work")
    carried = unpack(resume) if resume else []
    if carried:
        write_records(carried, work)
        log(f"resumed: {len(carried)} records already measured")
    new: list[dict] = []
    entry = {"commit": commit, "tiers": {}, "groups": [], "budget_s": budget_s, "torch": torch.__version__,
             "problems": []}
    settings = settings or TimerSettings(**CAMPAIGN_SETTINGS)
    plan = plan or {t.number: t for t in plan_tiers(device)}

    def problem(msg: str) -> None:
        entry["problems"].append(msg)
        log(f"PROBLEM: {msg}")

    def tier_cases(number: int) -> list:
        tier = plan[number]
        cases = list(tier.cases)
        for backend, extra in tier.optional.items():
            if extra and _importable(backend, extra[0].norm, device):
                cases += extra
            elif extra:
                log(f"tier {number}: {len(extra)} {backend} cases left out ({backend} does not import here)")
        return cases

    def checkpoint() -> None:
        _finish(entry, out, carried, new, t_start, partial=True)
        if on_group is not None:
            on_group(entry)

    def sweep(cases, number, verdicts, label):
        def on_record(rec):
            stamp(rec, verdicts[rec["norm"]["name"]], rec["config"]["backend"], forced=False)
            new.append(rec)

        s = run_sweep(cases, work, settings=settings, progress=False, on_record=on_record, deadline=deadline,
                      group_log=_Checkpointing(entry["groups"], checkpoint),
                      command=["normbench", "campaign", "--tier", str(number)],
                      interleave=True)  # every tier head to head, L2 flushed: what best ranks (issue #48)
        for case, err in s.failed:
            log(f"{label}: FAILED {case}: {err}")
        for reason, n in _skip_reasons(s).items():
            log(f"{label}: skipped {n}: {reason}")
        return s

    try:
        if smoke and 1 in plan:
            t0 = time.monotonic()
            pool = tier_cases(1)
            kept, refused, verdicts, left_out = _gate(pool, log)
            cases = smoke_cases(kept)
            log(f"smoke: {len(cases)} case(s), one per backend of tier 1 "
                f"({', '.join(c.describe() for c in cases) or 'none: every backend was refused'})")
            s = sweep(cases, 1, verdicts, "smoke")
            entry["smoke"] = _summary(s, cases, refused, t0, round(estimate(cases), 1), left_out)
            if s.interrupted:
                raise KeyboardInterrupt
            if s.written == 0 and not (cases and s.already_done == len(cases)):
                why = (f"{len(refused)} (norm, backend) pair(s) of tier 1 refused by the check gate, "
                       f"{len(left_out)} not available here" if not cases else
                       f"{len(s.failed)} failed, {len(s.skipped)} skipped of {len(cases)}")
                problem(f"the smoke step wrote no records ({why}): nothing would be measured; see the REFUSED, "
                        f"FAILED and skipped lines above (tier 1 had {len(pool)} cases)")
                entry["stopped"] = "smoke"
                return _finish(entry, out, carried, new, t_start)
        for number in tiers:
            t0 = time.monotonic()
            cases, refused, verdicts, left_out = _gate(tier_cases(number), log)
            s = sweep(cases, number, verdicts, f"tier {number}")
            entry["tiers"][number] = _summary(s, cases, refused, t0, round(estimate(cases), 1), left_out)
            log(f"tier {number}: {s.written} written, {s.already_done} already done, {len(s.skipped)} skipped, "
                f"{len(s.failed)} failed, {len(refused)} backend(s) refused"
                f"{' (out of time: resume with these records)' if s.out_of_time else ''}")
            if refused:
                problem(f"tier {number}: {len(refused)} (norm, backend, device) refused by the check gate: "
                        + ", ".join(f"{r['norm']}/{r['backend']}@{r['device']}" for r in refused))
            if s.failed:
                problem(f"tier {number}: {len(s.failed)} case(s) failed")
            if not cases or (s.written == 0 and s.already_done < len(cases)):
                problem(f"tier {number} wrote no records ({len(cases)} planned, {s.already_done} already done"
                        f"{', out of time' if s.out_of_time else ''})")
            if s.interrupted:
                raise KeyboardInterrupt
            if s.out_of_time:
                break
            for cmd in plan[number].commands:
                if time.monotonic() > deadline:
                    entry.setdefault("not_run", []).append(" ".join(cmd))
                    continue
                done = _run_command(cmd, Path(out), deadline)
                entry.setdefault("commands", []).append(done)
                if done["returncode"] != 0:
                    problem(f"tier {number}: {done['command']} exited {done['returncode']}")
    except KeyboardInterrupt:
        entry["interrupted"] = True
        log("interrupted: packing the records measured so far (re-run with --resume to go on)")
    return _finish(entry, out, carried, new, t_start)


class _Checkpointing(list):
    """The sweep's ``group_log``, which it appends to once it has written a group's records (``sweep.InTurn``): each
    append is a finished group, and ``checkpoint`` packs it."""

    def __init__(self, log: list, checkpoint):
        super().__init__()
        self.log, self.checkpoint = log, checkpoint

    def append(self, item) -> None:
        self.log.append(item)
        super().append(item)
        self.checkpoint()


def _finish(entry: dict, out, carried: list, new: list, t_start: float, partial: bool = False) -> dict:
    """Pack the records and write the log (both atomically: a stop leaves the old file or the new, whole).
    ``partial``: a checkpoint after a group, the log saying so (``"partial": true``) until the run ends."""
    from normbench.records.store import atomic_write_text

    # one record per id, the newest: a head-to-head set with a case not yet measured is measured whole, so a case
    # carried in (the smoke step's, a killed call's) can come back measured again
    records = list({r["id"]: r for r in carried + new}.values())
    paths = pack(records, out)
    entry["files"] = [p.name for p in paths]
    entry["records"] = len(records)
    entry["wall_s"] = round(time.monotonic() - t_start, 1)
    if partial:
        entry["partial"] = True
    else:
        entry.pop("partial", None)
    atomic_write_text(Path(out) / "campaign-log.json", json.dumps(entry, indent=1, default=str) + "\n")
    return entry


def _run_command(cmd, out: Path, deadline: float) -> dict:
    import subprocess

    env = dict(os.environ, TRITON_INTERPRET="0")
    timeout = max(10.0, deadline - time.monotonic())
    t0 = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, "-m", *cmd], capture_output=True, text=True, env=env, timeout=timeout)
        text, rc = proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as exc:   # its output is bytes whatever text= said
        got = "".join(b.decode(errors="replace") if isinstance(b, bytes) else b or "" for b in (exc.stdout, exc.stderr))
        text, rc = f"{got}\ntimed out after {timeout:.0f}s", 124
    from normbench.records.store import atomic_write_text

    atomic_write_text(out / "gpu-tests.log", text[-2_000_000:])
    return {"command": " ".join(cmd), "returncode": rc, "wall_s": round(time.monotonic() - t0, 1),
            "tail": text[-2000:]}


# --- command line -------------------------------------------------------------------------------------------------

def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tier", default="1", help="tiers to run, e.g. 1, 2, 1,2,3, models (4) or all (1, models, 2, 3;"
                        " default 1)")
    p.add_argument("--out", default=os.environ.get("OUT") or "campaign-out",
                   help="where the packed records and the log go (default $OUT, else campaign-out)")
    p.add_argument("--resume", nargs="*", default=[], metavar="PATH",
                   help="packed record files (or folders) from earlier runs: their cases are not measured again")
    p.add_argument("--budget-s", type=float, default=DEFAULT_BUDGET_S,
                   help=f"start no group after this many seconds (default {DEFAULT_BUDGET_S:g})")
    p.add_argument("--commit", default=os.environ.get("NORMBENCH_GIT_COMMIT"),
                   help="the git commit of this tree (the copied tree may lack .git)")
    p.add_argument("--no-smoke", action="store_true",
                   help="skip the smoke step (one tier-1 case per backend first; the campaign stops at once, exit 1, "
                        "if it writes no record)")
    p.add_argument("--dry-run", action="store_true", help="plan the GPU cases here and print counts and estimates")
    p.add_argument("--json", action="store_true", help="with --dry-run: print the plan summary as JSON")
    p.add_argument("--unpack", nargs="+", metavar="PATH",
                   help="merge packed record files (or folders) that came back into --into (no measuring)")
    p.add_argument("--into", default="results", help="with --unpack: the results directory (default results)")


def parse_tiers(text: str) -> tuple[int, ...]:
    if text.strip() == "all":
        return (1, MODELS_TIER, 2, 3)
    try:
        tiers = tuple(MODELS_TIER if t == "models" else int(t) for t in text.replace(" ", "").split(",") if t)
    except ValueError:
        tiers = ()
    if not tiers or any(t not in (1, 2, 3, MODELS_TIER) for t in tiers):
        raise ValueError(f"--tier takes 1, 2, 3, 4 or models (comma-separated) or all, got {text!r}")
    return tiers


def command(args) -> int:
    tiers = parse_tiers(args.tier)
    if args.unpack:
        from normbench.records.store import write_records

        recs = unpack(args.unpack)
        write_records(recs, args.into)
        print(f"{len(recs)} record(s) merged into {args.into}")
        return 0
    if args.dry_run:
        summary = dry_run("cuda", out=sys.stderr if args.json else sys.stdout)
        if args.json:
            from normbench._stdout import document_stream

            print(json.dumps(summary, indent=1), file=document_stream())
        return 0
    entry = run(tiers, out=args.out, resume=args.resume, budget_s=args.budget_s, commit=args.commit,
                smoke=not args.no_smoke)
    from normbench._stdout import document_stream

    print(json.dumps({k: entry[k] for k in ("records", "files", "wall_s", "problems")}), file=document_stream())
    if entry["problems"]:
        print(f"normbench campaign: {len(entry['problems'])} problem(s) (campaign-log.json, 'problems'):",
              file=sys.stderr)
        for p in entry["problems"]:
            print(f"  {p}", file=sys.stderr)
    return exit_code(entry)


def exit_code(entry: dict) -> int:
    """130 when interrupted, 1 when the log names any problem (a refusal, a failed case, a tier or smoke step that
    wrote nothing, a GPU test command that failed), else 0."""
    if entry.get("interrupted"):
        return 130
    return 1 if entry["problems"] else 0


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "campaign", help="tiered, resumable GPU kernel sweep packed into a few files (scripts/gpu-campaign.sh)",
        description=__doc__.split("\n\n")[0])
    add_arguments(p)
    p.set_defaults(func=command)


def main(argv=None) -> int:
    from normbench.processes import exit_stopped, interruptible

    p = argparse.ArgumentParser(prog="python -m normbench.campaign", description=__doc__.split("\n\n")[0])
    add_arguments(p)
    args = p.parse_args(argv)
    # SIGTERM (the device run's time limit) takes the Ctrl-C path, as in the normbench command: what was measured is
    # packed and the log written; a repeated signal does not cut that short; a stuck stop is reported and forced.
    try:
        with interruptible(program=argv is None):
            return command(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        if argv is None:
            exit_stopped(130)   # out now, without the interpreter's seconds of tearing torch down
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
