"""``normbench prune``: accuracy records from changed model or norm code leave results/; current ones, kernel
records and records this installation cannot judge stay."""

from __future__ import annotations

import test_site_support as sup

import normbench
from normbench.cli import main
from normbench.models import model_hash
from normbench.results.schema import make_record
from normbench.results.store import iter_records, write_records


def _accuracy(norm: str, seed: int, *, model_h: str | None = None, impl_h: str | None = None) -> dict:
    rec = sup.accuracy(norm, seed, 0.5, task="synth-shapes", model="resnet", offline=True)
    rec["config"]["model_hash"] = model_h or model_hash("resnet")
    impl = impl_h or (normbench.get_norm(norm).impl_hash("eager") if norm in normbench.list_norms() else "a" * 16)
    return make_record("accuracy", rec["norm"], rec["config"], rec["metrics"], rec["provenance"], impl_hash=impl)


def test_prune_removes_only_records_of_changed_code(tmp_path, capsys):
    current = _accuracy("groupnorm", 0)
    old_model = _accuracy("groupnorm", 1, model_h="0" * 16)
    old_norm = _accuracy("batchnorm", 0, impl_h="f" * 16)
    plugin = _accuracy(dict(sup.norm_meta("groupnorm"), name="not_installed_norm"), 2)
    write_records([current, old_model, old_norm, plugin], tmp_path)
    before = {r["id"] for _, r in iter_records(tmp_path)}
    assert len(before) == 4

    assert main(["prune", "--dry-run", str(tmp_path)]) == 0
    assert {r["id"] for _, r in iter_records(tmp_path)} == before  # a dry run changes nothing
    out = capsys.readouterr().out
    assert "would remove 2 stale" in out and "model code changed" in out and "norm code changed" in out

    assert main(["prune", str(tmp_path)]) == 0
    after = {r["id"] for _, r in iter_records(tmp_path)}
    assert after == {current["id"], plugin["id"]}
    assert "cannot recompute" in capsys.readouterr().err  # the unknown norm is reported, not removed
    assert main(["prune", str(tmp_path)]) == 0 and {r["id"] for _, r in iter_records(tmp_path)} == after
