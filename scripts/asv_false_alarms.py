"""Measure how often ``asv continuous`` cries wolf and how often it misses a 5x slower RMSNorm forward (issue #40).

A temporary git repository holds a copy of a normbench tree (``--source``, default this checkout; tracked and new
files, ``results/`` left out) and three throw-away commits: the base, a comment-only change to RMSNorm's forward
("null": nothing measurable changed) and RMSNorm's eager forward computed five times per call ("slow"). Nothing is
committed anywhere else. ASV runs in that repository as a user runs it (its own HOME and machine, this venv's
packages reused through ``NORMBENCH_ASV_SITE_PACKAGES``), ``--runs`` times per kind, alternating null and slow so both
see the same load. A null run is a false alarm when ASV flags any benchmark (``+``, ``-`` or ``!`` in its table); a
slow run is a miss unless it exits 1 with an RMSNorm benchmark listed as slower. Prints one JSON line per run
(exit status, flagged benchmarks, wall time, load average before and after) and a summary; ``--out`` writes both.

    .venv/bin/python scripts/asv_false_alarms.py --runs 5                           # this tree, the README's command
    .venv/bin/python scripts/asv_false_alarms.py --source ../main --bench '' --interleave auto \\
        --threads '' --runs 1                                # another tree's plain `asv continuous --factor 1.3`

Ctrl-C stops the ASV run under way (its whole process group), removes the temporary repository and keeps the
lines already printed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# The README's default set for a shared machine: the drift-normalised kernel timings (docs/measurement.md, "ASV").
DEFAULT_BENCH = "time_in_refs"

FORWARD = ("        xf = upcast(x)\n"
           "        ms = xf.pow(2).mean(self.dim, keepdim=True)\n"
           "        y = (xf * torch.rsqrt(ms + self.eps)).to(x.dtype)\n")
NULL = "        # a comment-only change: nothing measurable differs from the base commit\n" + FORWARD
SLOW = ("        for _ in range(5):  # planted slow-down: the forward computed five times per call\n"
        "            xf = upcast(x)\n"
        "            ms = xf.pow(2).mean(self.dim, keepdim=True)\n"
        "            y = (xf * torch.rsqrt(ms + self.eps)).to(x.dtype)\n")
FLAG = re.compile(r"^\|?\s*([+\-!])\s+\S")  # a changed row of asv's table: + slower, - faster, ! newly failing


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.email=bench@normbench", "-c", "user.name=bench",
                           *args], check=True, capture_output=True, text=True).stdout.strip()


def copy_tree(src: Path, dst: Path) -> None:
    """The files git would commit in ``src`` (tracked and new, ignored ones left out), without recorded results."""
    out = subprocess.run(["git", "-C", str(src), "ls-files", "-co", "--exclude-standard", "-z"], check=True,
                         capture_output=True).stdout.decode()
    for rel in filter(None, out.split("\0")):
        path = src / rel
        if rel.startswith("results/") or not path.is_file():
            continue
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, dst / rel)


def plant(repo: Path, new: str) -> None:
    """Replace RMSNorm's forward body (``FORWARD``, inside ``class RMSNorm`` only) by ``new``."""
    features = repo / "normbench" / "norms" / "features.py"
    text = features.read_text()
    start = text.index("class RMSNorm")
    end = text.index("\nclass ", start + 1)
    if FORWARD not in text[start:end]:
        sys.exit("RMSNorm.forward changed: update FORWARD in scripts/asv_false_alarms.py")
    features.write_text(text[:start] + text[start:end].replace(FORWARD, new, 1) + text[end:])


def make_repo(source: Path, root: Path) -> tuple[Path, dict[str, str]]:
    """(repository, {"base"|"null"|"slow": commit}); null and slow are both children of base."""
    repo = root / "repo"
    repo.mkdir()
    copy_tree(source, repo)
    git(repo, "init", "-q", "-b", "base")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    commits = {"base": git(repo, "rev-parse", "HEAD")}
    for kind, body in (("null", NULL), ("slow", SLOW)):
        git(repo, "checkout", "-q", "-b", kind, commits["base"])
        plant(repo, body)
        git(repo, "commit", "-qam", kind)
        commits[kind] = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "base")
    return repo, commits


def _session(sid: int) -> list[int]:
    """Processes of session ``sid`` (Linux ``/proc``): ASV gives each benchmark process its own process group, so
    killing ASV's group alone would leave a benchmark running."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid:  # after "pid (comm)": state, ppid, pgrp, session
            pids.append(int(stat.parent.name))
    return pids


def _kill_session(sid: int, sig: int) -> None:
    for pid in _session(sid) or [sid]:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def run_asv(cmd: list[str], repo: Path, env: dict, log: Path, timeout: float) -> int:
    """Run ``cmd`` in a session of its own, output to ``log``; on timeout or interrupt the whole session (ASV and
    every benchmark process it started) is stopped."""
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, cwd=repo, env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            fh.write(f"\n[asv_false_alarms] killed after {timeout:.0f} s\n")
            return -1
        finally:
            if proc.poll() is None:
                _kill_session(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    pass
            _kill_session(proc.pid, signal.SIGKILL)  # benchmark processes ASV left behind
            proc.wait()


def ratios(asv: list[str], repo: Path, env: dict, base: str, target: str, bench: str) -> dict[str, float]:
    """``{benchmark: target/base}`` for every benchmark of ``bench`` both commits have, from ``asv compare`` of the
    saved results (it lists every row): the margin a run had to ``--factor``, flagged or not."""
    try:
        out = subprocess.run([*asv, "compare", base, target], cwd=repo, env=env, capture_output=True, text=True,
                             timeout=300).stdout
    except subprocess.TimeoutExpired:
        return {}
    pat = re.compile(bench or ".")
    found = {}
    for ln in out.splitlines():
        cells = [c.strip() for c in ln.strip().strip("|").split("|")]
        if len(cells) != 5 or not pat.search(cells[4]):
            continue
        try:
            found[cells[4]] = float(cells[3].lstrip("~"))
        except ValueError:  # the header, a rule, or n/a
            continue
    return found


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def judge(kind: str, rc: int, out: str) -> dict:
    """What one run reported: the flagged rows, and whether it is a false alarm (null) or a miss (slow)."""
    flagged = [ln.strip(" |") for ln in out.splitlines() if FLAG.match(ln)]
    slower_rms = [ln for ln in flagged if ln.startswith("+") and "'rmsnorm'" in ln]
    res = {"kind": kind, "rc": rc, "flagged": flagged}
    if kind == "null":
        res["false_alarm"] = bool(flagged) or rc != 0
    else:
        res["detected"] = rc == 1 and bool(slower_rms)
        res["other_flagged"] = [ln for ln in flagged if "'rmsnorm'" not in ln]
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5, help="runs per kind (null, slow); default 5")
    ap.add_argument("--kinds", default="null,slow", help="which commits to compare with the base (default both)")
    ap.add_argument("--source", type=Path, default=REPO, help="normbench tree to copy (default: this checkout)")
    ap.add_argument("--bench", default=DEFAULT_BENCH,
                    help="asv -b regex (default: the README's shared-machine set); '' runs every benchmark")
    ap.add_argument("--factor", default="1.3", help="asv --factor (default 1.3, as in issue #40)")
    ap.add_argument("--interleave", choices=("yes", "no", "auto"), default="yes",
                    help="--interleave-rounds (yes, default), --no-interleave-rounds (no) or neither (auto: asv "
                    "interleaves when a selected benchmark has rounds > 1)")
    ap.add_argument("--threads", default="1", help="OMP_NUM_THREADS for ASV (default 1; '' leaves it unset)")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per asv continuous run (default 1800)")
    ap.add_argument("--out", type=Path, help="also write the JSON lines and the summary here (…/name.jsonl, .md)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary repository (its path is printed)")
    args = ap.parse_args(argv)
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    if not kinds or set(kinds) - {"null", "slow"}:
        ap.error("--kinds takes null, slow or null,slow")
    if args.runs < 1:
        ap.error("--runs must be at least 1")
    source = args.source.resolve()
    if not (source / "asv.conf.json").is_file():
        ap.error(f"{source} has no asv.conf.json: pass a normbench checkout as --source")

    # Stop on Ctrl-C or SIGTERM alike, even when started with SIGINT ignored (a background job of a script).
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    root = Path(tempfile.mkdtemp(prefix="nb-asv-alarms-"))
    lines: list[dict] = []
    try:
        repo, commits = make_repo(source, root)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("NORMBENCH_", "ASV"))}
        env.update(HOME=str(root / "home"), NORMBENCH_CACHE_DIR=str(root / "cache"),
                   PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
                   NORMBENCH_ASV_SITE_PACKAGES=sysconfig.get_paths()["purelib"], NORMBENCH_DISABLE_PLUGINS="1")
        if args.threads:
            env["OMP_NUM_THREADS"] = args.threads
        (root / "home").mkdir()
        asv = [sys.executable, "-m", "asv"]
        subprocess.run([*asv, "machine", "--yes", "--machine", "bench"], cwd=repo, env=env, check=True,
                       capture_output=True, timeout=300)
        base_cmd = [*asv, "continuous", "--factor", args.factor]
        if args.interleave != "auto":
            base_cmd.append("--interleave-rounds" if args.interleave == "yes" else "--no-interleave-rounds")
        if args.bench:
            base_cmd += ["-b", args.bench]
        print(f"# source {source} ({git(source, 'rev-parse', '--short', 'HEAD')}), repo {repo}", flush=True)
        print(f"# command: {' '.join(base_cmd[2:])} BASE TARGET  (OMP_NUM_THREADS={args.threads or 'unset'})",
              flush=True)
        for i in range(args.runs):
            for kind in kinds:
                log = root / f"{kind}-{i}.log"
                load0, t0 = os.getloadavg()[0], time.monotonic()
                rc = run_asv([*base_cmd, commits["base"], commits[kind]], repo, env, log, args.timeout)
                wall = time.monotonic() - t0
                res = judge(kind, rc, log.read_text(errors="replace"))
                res["ratios"] = ratios(asv, repo, env, commits["base"], commits[kind], args.bench)
                res.update(run=i + 1, wall_s=round(wall, 1), load_before=round(load0, 2),
                           load_after=round(os.getloadavg()[0], 2))
                lines.append(res)
                print(json.dumps(res), flush=True)
                if args.keep or rc not in (0, 1):
                    shutil.copy2(log, Path(tempfile.gettempdir()) / f"asv-alarms-{root.name}-{log.name}")
    except KeyboardInterrupt:
        print("# interrupted: the summary covers the runs that finished", flush=True)
    finally:
        if args.keep:
            print(f"# kept {root}", flush=True)
        else:
            shutil.rmtree(root, ignore_errors=True)
    summary = summarize(lines, args)
    print(summary, flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
        args.out.with_suffix(".md").write_text(summary + "\n")
    return 0


def summarize(lines: list[dict], args) -> str:
    null = [x for x in lines if x["kind"] == "null"]
    slow = [x for x in lines if x["kind"] == "slow"]
    walls = [x["wall_s"] for x in lines]
    loads = [x["load_before"] for x in lines] + [x["load_after"] for x in lines]
    out = [f"asv continuous --factor {args.factor} {'-b ' + repr(args.bench) if args.bench else '(every benchmark)'}"
           f", interleave {args.interleave}, OMP_NUM_THREADS="
           f"{args.threads or 'unset'}, source {args.source}"]
    if null:
        fa = sum(x["false_alarm"] for x in null)
        out.append(f"- comment-only commit: false alarm in {fa} of {len(null)} runs "
                   f"(flagged per run: {[len(x['flagged']) for x in null]})")
    if slow:
        det = sum(x["detected"] for x in slow)
        out.append(f"- 5x RMSNorm forward: missed in {len(slow) - det} of {len(slow)} runs "
                   f"(other benchmarks flagged per run: {[len(x['other_flagged']) for x in slow]})")
    spread = [max(max(v, 1 / v) for v in x["ratios"].values()) for x in null if x.get("ratios")]
    if spread:
        out.append(f"- comment-only commit, largest ratio of any benchmark (or its inverse) per run: "
                   f"{', '.join(f'{v:.2f}' for v in spread)} (--factor {args.factor})")
    for pass_ in ("'fwd')", "'fwd+bwd')"):
        rms = [v for x in slow for k, v in x.get("ratios", {}).items() if "'rmsnorm'" in k and k.endswith(pass_)]
        if rms:
            out.append(f"- 5x RMSNorm forward, RMSNorm {pass_[1:-2]} ratio per run: "
                       f"{', '.join(f'{v:.2f}' for v in rms)}")
    if walls:
        out.append(f"- wall time per asv continuous: {min(walls):.0f} to {max(walls):.0f} s; "
                   f"1-min load average {min(loads):.1f} to {max(loads):.1f} on {os.cpu_count()} cores")
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
