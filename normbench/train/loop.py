"""The one training harness: seeded, deterministic on the CPU, resumable, DDP-aware, and it records divergence.

``train(run)`` trains one (task, model, norm, placement, seed) cell with its fixed recipe and returns the
accuracy record (``normbench.results`` schema, kind ``accuracy``). A non-finite training loss or evaluation
metric stops the run and is recorded as ``diverged`` with the 1-based step at which it happened; it is a result,
not a crash. Wall times count training steps only (evaluation time is reported separately as ``eval_time_s``).
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import shlex
import sys
import time
import warnings
from dataclasses import dataclass, field
from dataclasses import replace as dc_replace
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

import normbench
from normbench.executor import heartbeat
from normbench.models import MODEL_LAYOUT, build_model, model_hash
from normbench.models.norms import resolve
from normbench.tasks import data_config, get_task, load_task
from normbench.train.data import Batcher
from normbench.train.recipes import Recipe, cell_recipe, recipe_hash

#: Curve points kept per run (besides every evaluation).
CURVE_POINTS = 50


@dataclass
class Run:
    """Everything that defines one training run (one seed of one cell)."""

    task: str
    model: str
    norm: object  # registry name or NormSpec
    seed: int = 0
    placement: str | None = None
    variant: str = "default"
    quick: bool = False
    device: str = "cpu"
    data_dir: str | None = None
    base_norm: str | None = None
    qk_norm: bool = False
    #: Implementation of the norm under test ("eager", "compile", "triton", ...).
    backend: str = "eager"
    #: Recipe fields changed for this run (e.g. {"steps": 20}); recorded in the config, so they are other cells.
    recipe_overrides: dict = field(default_factory=dict)
    threads: int | None = 1
    checkpoint_dir: str | None = None
    checkpoint_every: int | None = None
    resume: bool = True
    keep_checkpoint: bool = False
    progress: bool = True
    #: Stop (after checkpointing) once this many steps are done, as an interruption would; for tests.
    stop_after: int | None = None
    #: "test": score on the task's test split; "val": a tuning run scored on the validation split held out from
    #: training (flagged ``tuning``, never ranked). Both train on the same training split.
    split: str = "test"
    #: For a run at a tuned learning rate: the search that chose it (recorded in the config).
    lr_search: dict | None = None
    #: Under torchrun: BatchNorm statistics over the global batch of every rank (normbench.train.distributed).
    sync_bn: bool = False

    def spec(self):
        return resolve(self.norm)

    def model_spec(self, recipe: Recipe):
        """The spec the model builds the norm from: ``spec()`` with ``recipe.norm_kwargs`` (constructor options its
        official code derives from the recipe, e.g. PowerNorm's warm-up) added to its defaults."""
        spec = self.spec()
        if not recipe.norm_kwargs:
            return spec
        return dc_replace(spec, default_kwargs={**spec.default_kwargs, **recipe.norm_kwargs})

    def recipe(self) -> Recipe:
        return cell_recipe(self.task, self.model, self.spec().name, self.placement, self.variant, self.quick,
                           self.recipe_overrides)


# -- distributed ----------------------------------------------------------------------------------------------------

def distributed_env() -> bool:
    """True under torchrun (``RANK`` and ``WORLD_SIZE`` set), even with one process."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def _setup_distributed(device: str):
    """(rank, world, device); initialises the process group once when launched by torchrun."""
    if not distributed_env():
        return 0, 1, torch.device(device)
    import torch.distributed as dist

    if not dist.is_initialized():
        backend = "nccl" if device.startswith("cuda") else "gloo"
        dist.init_process_group(backend=backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    if device.startswith("cuda"):
        local = int(os.environ.get("LOCAL_RANK", rank % max(1, torch.cuda.device_count())))
        torch.cuda.set_device(local)
        return rank, world, torch.device("cuda", local)
    return rank, world, torch.device(device)


def _all_reduce(t: torch.Tensor, world: int) -> torch.Tensor:
    if world > 1 or distributed_env():
        import torch.distributed as dist

        if dist.is_initialized():
            dist.all_reduce(t)
    return t


# -- pieces ---------------------------------------------------------------------------------------------------------

def validation_split(data):
    """``data`` scored on its validation split: the loader's ``data.val`` becomes the evaluation set.

    Every loader holds validation out of the training split itself (``normbench.tasks.splits``, or generated from
    its own seed for offline tasks), so training never sees it; a task without one cannot be tuned.
    """
    from dataclasses import replace as dc_replace

    if not data.val:
        raise ValueError(f"task {data.task.name!r} has no validation split: its loader must set TaskData.val "
                         "(see normbench.tasks.splits.carve_validation) before it can be tuned")
    return dc_replace(data, eval=data.val)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy as np

        np.random.seed(seed % (2 ** 32))
    except ImportError:  # pragma: no cover
        pass


def make_optimizer(model: nn.Module, recipe: Recipe) -> torch.optim.Optimizer:
    """Weight decay on matrices and conv kernels only (not on biases, norm gains or scalars).

    A model with ``lr_scales()`` (parameter id -> multiplier; Fixup's scalars train at a tenth of the rate) gets
    those parameters in groups of their own.
    """
    scales = model.lr_scales() if hasattr(model, "lr_scales") else {}
    groups: dict[tuple, list] = {}
    for p in model.parameters():
        if p.requires_grad:
            key = (recipe.weight_decay if p.dim() >= 2 else 0.0, scales.get(id(p), 1.0))
            groups.setdefault(key, []).append(p)
    groups = [{"params": ps, "weight_decay": wd, "lr_scale": sc} for (wd, sc), ps in groups.items()]
    if recipe.optimizer == "sgd":
        cls, kwargs = torch.optim.SGD, dict(lr=recipe.lr, momentum=recipe.momentum, nesterov=recipe.momentum > 0)
    elif recipe.optimizer == "adamw":
        cls, kwargs = torch.optim.AdamW, dict(lr=recipe.lr, betas=tuple(recipe.betas))
    else:
        raise ValueError(f"unknown optimizer {recipe.optimizer!r} (sgd or adamw)")
    try:  # the fused (single-kernel) update is several times faster for many small tensors
        return cls(groups, fused=True, **kwargs)
    except (RuntimeError, TypeError, ValueError):
        return cls(groups, **kwargs)


def lr_factor(step: int, recipe: Recipe) -> float:
    """Multiplier of the base learning rate at (0-based) ``step``: linear warm-up, then cosine (or constant)."""
    if recipe.warmup_steps and step < recipe.warmup_steps:
        return (step + 1) / recipe.warmup_steps
    if recipe.schedule == "constant":
        return 1.0
    span = max(1, recipe.steps - recipe.warmup_steps)
    t = min(1.0, (step - recipe.warmup_steps) / span)
    return recipe.min_lr_ratio + (1 - recipe.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * t))


def _set_lr(opt, recipe: Recipe, step: int) -> None:
    f = lr_factor(step, recipe)
    for g in opt.param_groups:
        g["lr"] = recipe.lr * f * g.get("lr_scale", 1.0)


def _loss(out: torch.Tensor, y: torch.Tensor, recipe: Recipe) -> torch.Tensor:
    if out.dim() == 3:
        return F.cross_entropy(out.reshape(-1, out.shape[-1]).float(), y.reshape(-1))
    return F.cross_entropy(out.float(), y, label_smoothing=recipe.label_smoothing)


def _agc_params(model: nn.Module):
    """Parameters AGC clips: all but the final classifier (NFNets leave it unclipped)."""
    head = getattr(model, "fc", None) or getattr(model, "head", None)
    skip = {id(p) for p in head.parameters()} if isinstance(head, nn.Module) else set()
    return [p for p in model.parameters() if id(p) not in skip]


@torch.no_grad()
def evaluate(model: nn.Module, batcher: Batcher, limit: int | None, world: int) -> float:
    """Top-1 accuracy or perplexity (exp of mean cross-entropy per token) over the (limited) eval set."""
    model.eval()
    text = batcher.task.modality == "text"
    total = torch.zeros(2, dtype=torch.float64, device=batcher.device)
    for x, y in batcher.eval_batches(limit):
        out = model(x)
        if text:
            ce = F.cross_entropy(out.reshape(-1, out.shape[-1]).float(), y.reshape(-1), reduction="sum")
            total += torch.stack([ce.double(), torch.tensor(float(y.numel()), dtype=torch.float64,
                                                            device=total.device)])
        else:
            correct = (out.argmax(-1) == y).sum()
            total += torch.stack([correct.double(), torch.tensor(float(len(y)), dtype=torch.float64,
                                                                 device=total.device)])
    _all_reduce(total, world)
    model.train()
    if total[1] == 0:
        raise ValueError(f"{batcher.task.name}: the evaluation set is empty")
    if text:
        mean_ce = (total[0] / total[1]).item()
        return math.exp(mean_ce) if math.isfinite(mean_ce) and mean_ce < 700 else float("inf")
    return (total[0] / total[1]).item()


def _reached(value: float, target: float | None, higher: bool) -> bool:
    return target is not None and (value >= target if higher else value <= target)


def _better(a: float, b: float | None, higher: bool) -> bool:
    return b is None or (a > b if higher else a < b)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train_step(model: nn.Module, core: nn.Module, opt: torch.optim.Optimizer, batcher: Batcher, recipe: Recipe,
               step: int, world: int = 1, agc=None, agc_params=None, after_step=None) -> torch.Tensor:
    """One optimisation step at (0-based) ``step`` of the training loop: its batch, learning rate, loss, backward,
    clipping, update. ``model`` is what is called (DDP-wrapped under torchrun), ``core`` the module itself.

    Returns ``[loss, non-finite]`` (float64, summed over ranks); when the loss is not finite on any rank nothing is
    updated (the loop records a divergence). The ASV and pytest-benchmark suites time this same step
    (``normbench.train.step``).
    """
    x, y = batcher.train_batch(step)
    _set_lr(opt, recipe, step)
    loss = _loss(model(x), y, recipe)
    flag = torch.stack([loss.detach().double(), torch.tensor(0.0, dtype=torch.float64, device=loss.device)])
    flag[1] = 0.0 if torch.isfinite(loss) else 1.0
    _all_reduce(flag, world)
    if flag[1] > 0:
        return flag
    opt.zero_grad(set_to_none=True)
    loss.backward()
    if recipe.grad_clip:
        torch.nn.utils.clip_grad_norm_(core.parameters(), recipe.grad_clip)
    if agc is not None:
        agc(agc_params, recipe.agc)
    opt.step()
    if after_step is not None:
        after_step()  # nGPT: weights back onto the unit sphere
    return flag


# -- configuration and record ---------------------------------------------------------------------------------------

def model_options(model: str, recipe: Recipe) -> dict:
    """The recipe's model options; the GPT's context length is the recipe's ``seq_len`` (the batches' length)."""
    opts = recipe.model_kwargs(model)
    if model == "gpt" and recipe.seq_len is not None:
        if opts.setdefault("seq_len", recipe.seq_len) != recipe.seq_len:
            raise ValueError(f"recipe {recipe.name}: model_options seq_len {opts['seq_len']} differs from the "
                             f"recipe's seq_len {recipe.seq_len}")
    return opts


def run_config(run: Run, model_config: dict | None = None, world: int = 1) -> dict:
    """The record's ``config`` for ``run`` (what defines the cell and seed; hashed into the record id)."""
    task = get_task(run.task)
    recipe = run.recipe()
    if model_config is None:
        model_config = build_model(run.model, task, run.model_spec(recipe), placement=run.placement,
                                   qk_norm=run.qk_norm, base_norm=run.base_norm, backend=run.backend,
                                   **model_options(run.model, recipe)).config
    placement = (run.placement or "pre_ln") if run.model == "gpt" else None
    config = {
        "task": task.name,
        "task_offline": task.offline,
        "model": run.model,
        "placement": placement,
        "seed": int(run.seed),
        "recipe": recipe.to_dict(),
        "quick": bool(run.quick),
        "device": "cuda" if str(run.device).startswith("cuda") else "cpu",
        "batch_size": recipe.batch_size,
        "variant": run.variant,
        "layout": MODEL_LAYOUT[run.model],
        "base_norm": model_config.get("base_norm"),
        "qk_norm": bool(model_config.get("qk_norm", False)),
        "world_size": world,
        "model_config": model_config,
        "split": run.split,
        "recipe_hash": recipe_hash(recipe),
        "model_hash": model_hash(run.model),
        # Where the splits came from and how many examples (and classes) the run saw of each.
        "data": data_config(run.task, data_dir=run.data_dir, quick=run.quick),
    }
    if run.split not in ("test", "val"):
        raise ValueError(f"split must be 'test' or 'val', got {run.split!r}")
    if run.lr_search is not None:
        config["lr_search"] = run.lr_search
    if run.backend != "eager":
        # Only when not eager, so records made before backends were selectable keep their ids (and are skipped).
        config["backend"] = run.backend
    if run.sync_bn:  # likewise only when set
        config["sync_bn"] = True
    return config


def checkpoint_root(explicit: str | None = None) -> Path:
    if explicit:
        return Path(explicit)
    base = os.environ.get("NORMBENCH_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "normbench")
    return Path(base) / "checkpoints"


def _save_checkpoint(path: Path, payload: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        torch.save(payload, tmp)
        os.replace(tmp, path)
    except BaseException:  # an interruption mid-save leaves no partial file behind
        tmp.unlink(missing_ok=True)
        raise


def _rng_state(device: torch.device) -> dict:
    state = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def _set_rng_state(state: dict, device: torch.device) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


def command_line() -> str:
    return " ".join(shlex.quote(a) for a in ["normbench", *sys.argv[1:]]) if sys.argv else "normbench"


def train(run: Run, command: str | None = None) -> dict | None:
    """Train one run and return its accuracy record (``None`` on ranks other than 0, or when stopped early)."""
    from normbench.records import make_record, provenance

    rank, world, device = _setup_distributed(run.device)
    if run.threads and device.type == "cpu":
        torch.set_num_threads(int(run.threads))
    # Deterministic kernels where PyTorch has them; warn (not fail) for ops without one.
    torch.use_deterministic_algorithms(True, warn_only=True)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = False
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

    task = get_task(run.task)
    spec = run.spec()
    recipe = run.recipe()
    data = load_task(run.task, data_dir=run.data_dir, quick=run.quick)
    if run.split == "val":
        data = validation_split(data)

    seed_everything(run.seed)
    built = build_model(run.model, task, run.model_spec(recipe), placement=run.placement, qk_norm=run.qk_norm,
                        base_norm=run.base_norm, backend=run.backend,
                        **model_options(run.model, recipe))
    config = run_config(run, built.config, world)
    prov = provenance(command or command_line(), device=device.type)
    impl_hash = spec.impl_hash(run.backend)
    record_id = normbench.results.record_id("accuracy", spec.name, config, prov["hardware_id"], impl_hash)

    model = built.module.to(device)
    if run.sync_bn:
        from normbench.train.distributed import sync_batchnorm

        sync_batchnorm(model)
    core = model
    if distributed_env():
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    opt = make_optimizer(core, recipe)
    batcher = Batcher(data, recipe, run.seed, device, rank, world)
    higher = task.higher_is_better

    state = {"step": 0, "curve": [], "train_time": 0.0, "eval_time": 0.0, "best": None, "final": None,
             "steps_to_target": None, "time_to_target": None, "diverged_step": None, "loss_sum": 0.0,
             "loss_n": 0}
    ckpt_path = checkpoint_root(run.checkpoint_dir) / f"{record_id}.pt"
    every = run.checkpoint_every or max(50, recipe.steps // 10)
    if run.resume and ckpt_path.is_file():
        try:
            ck = torch.load(ckpt_path, map_location=device, weights_only=False)
        except Exception as exc:
            warnings.warn(f"ignoring unreadable checkpoint {ckpt_path}: {exc}", stacklevel=2)
            ck = None
        if ck is not None and ck.get("config") == config:
            core.load_state_dict(ck["model"])
            opt.load_state_dict(ck["optimizer"])
            state.update(ck["state"])
            _set_rng_state(ck["rng"], device)
        elif ck is not None:
            warnings.warn(f"checkpoint {ckpt_path} is for another configuration; starting afresh", stacklevel=2)

    def checkpoint():
        if rank == 0:
            _save_checkpoint(ckpt_path, {"config": config, "model": core.state_dict(), "optimizer": opt.state_dict(),
                                         "state": state, "rng": _rng_state(device)})

    log_every = max(1, recipe.steps // CURVE_POINTS)
    from tqdm.auto import tqdm

    desc = f"{spec.name} {recipe.name}" + (f" {run.placement}" if run.placement else "") + f" seed {run.seed}"
    bar = tqdm(total=recipe.steps, initial=state["step"], desc=desc, unit="step", leave=False,
               disable=(not run.progress) or rank != 0 or None)
    model.train()
    agc = None
    if recipe.agc:
        from normbench.norms.weights import adaptive_grad_clip as agc
    agc_params = _agc_params(core) if recipe.agc else None
    heartbeat()  # data and model are ready: from here the watchdog waits for steps
    after_step = getattr(core, "after_step", None)
    try:
        while state["step"] < recipe.steps:
            step = state["step"]
            _sync(device)
            t0 = time.perf_counter()
            flag = train_step(model, core, opt, batcher, recipe, step, world, agc, agc_params, after_step)
            if flag[1] > 0:
                state["diverged_step"] = step + 1
                state["curve"].append([step + 1, None, None])
                break
            _sync(device)
            state["train_time"] += time.perf_counter() - t0
            state["step"] = step = step + 1
            state["loss_sum"] += flag[0].item() / world
            state["loss_n"] += 1
            heartbeat()  # the no-progress watchdog of normbench.executor
            bar.update(1)
            is_eval = step % recipe.eval_every == 0 or step == recipe.steps
            if step % log_every == 0 or is_eval:
                mean_loss = state["loss_sum"] / state["loss_n"]
                state["loss_sum"], state["loss_n"] = 0.0, 0
                point = [step, mean_loss, None]
                if is_eval:
                    te = time.perf_counter()
                    value = evaluate(model, batcher, None if step == recipe.steps else recipe.eval_limit, world)
                    state["eval_time"] += time.perf_counter() - te
                    if not math.isfinite(value):
                        state["diverged_step"] = step
                        state["curve"].append(point)
                        break
                    point[2] = value
                    if _better(value, state["best"], higher):
                        state["best"] = value
                    if state["steps_to_target"] is None and _reached(value, recipe.target, higher):
                        state["steps_to_target"] = step
                        state["time_to_target"] = state["train_time"]
                    if step == recipe.steps:
                        state["final"] = value
                    bar.set_postfix({task.metric: f"{value:.4g}", "loss": f"{mean_loss:.3f}"})
                state["curve"].append(point)
            if step % every == 0 and step < recipe.steps:
                checkpoint()
            if run.stop_after is not None and step >= run.stop_after and step < recipe.steps:
                checkpoint()
                return None
    except KeyboardInterrupt:
        checkpoint()
        raise
    finally:
        bar.close()

    diverged = state["diverged_step"] is not None
    metrics = {
        "metric": task.metric,
        "higher_is_better": higher,
        "final": None if diverged else state["final"],
        "best": state["best"],
        "steps": state["step"],
        "wall_time_s": state["train_time"],
        "target": recipe.target,
        "time_to_target_s": state["time_to_target"],
        "steps_to_target": state["steps_to_target"],
        "diverged": diverged,
        "diverged_step": state["diverged_step"],
        "curve": state["curve"],
        "eval_time_s": state["eval_time"],
        "params": sum(p.numel() for p in core.parameters()),
    }
    if rank != 0:
        return None
    flags = run_flags(run, state["diverged_step"])
    record = make_record("accuracy", spec.to_dict(), config, metrics, prov, impl_hash=impl_hash,
                         flags=tuple(flags), flag_reasons=flags)
    if not run.keep_checkpoint:
        with contextlib.suppress(OSError):
            ckpt_path.unlink()
    return record


def record_id_for(run: Run, world: int = 1) -> str:
    """The id ``train(run)`` will give its record here (used to skip cells already in ``results/``)."""
    from normbench.records import hardware, hardware_id

    if run.threads and not str(run.device).startswith("cuda"):
        torch.set_num_threads(int(run.threads))
    hw = hardware("cuda" if str(run.device).startswith("cuda") else "cpu")
    spec = run.spec()
    return normbench.results.record_id("accuracy", spec.name, run_config(run, world=world), hardware_id(hw),
                                       spec.impl_hash(run.backend))


def run_flags(run: Run, diverged_step: int | None) -> dict[str, str]:
    """The flags (with reasons) of a run's record: a diverged run and a tuning run are kept but never ranked."""
    flags = {}
    if diverged_step is not None:
        flags["diverged"] = (f"non-finite training loss or evaluation metric at step {diverged_step}; "
                             "kept as a result (counted in the cell's divergence rate)")
    if run.split == "val":
        flags["tuning"] = "learning-rate search run, scored on the validation split; never ranked"
    return flags
