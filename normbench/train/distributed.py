"""Synchronised batch statistics for training under ``torchrun``: BatchNorm over the global batch of every rank.

Under DDP each rank normalises its own share of the batch (B / world examples): BatchNorm's statistics, and so the
model, then depend on the world size. ``sync_batchnorm(model)`` turns every normbench ``BatchNorm`` in ``model`` into
:class:`SyncBatchNorm`, whose training statistics (mean, biased variance; the running variance unbiased) are taken
over the global batch with a differentiable all-reduce (``torch.distributed.nn``), so N ranks train as one process
with the whole batch would, on CPU (gloo) as on GPU (NCCL). ``torch.nn.SyncBatchNorm`` is not used: it runs on GPUs
only and expects channels in dimension 1, while normbench's BatchNorm also normalises token layouts.

Other batch-statistic norms (Ghost BatchNorm, PowerNorm, Unified Normalization, Online Normalization,
Batch-Channel Normalization) have no synchronised form here: :func:`sync_batchnorm` refuses them with a clear error.
Without ``--sync-bn`` they, and BatchNorm, use each rank's local batch (see docs/scale-out.md).
"""

from __future__ import annotations

import torch
from torch import nn

from normbench.norms.batch import BatchNorm


def _world() -> int:
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


class SyncBatchNorm(BatchNorm):
    """normbench's BatchNorm with training statistics over every rank's batch (same parameters and state)."""

    def _bn(self, xs: torch.Tensor, training: bool) -> torch.Tensor:
        if not training or _world() == 1:
            return super()._bn(xs, training)
        import torch.distributed as dist
        from torch.distributed.nn.functional import all_reduce

        x64 = xs.double()  # sums in float64: E[x²] − E[x]² cancels badly in float32
        local = torch.cat([x64.sum((0, 2)), (x64 * x64).sum((0, 2))])
        total = all_reduce(local)  # differentiable: the gradient flows through the global statistics
        count = torch.tensor([xs.shape[0] * xs.shape[2]], dtype=torch.float64, device=xs.device)
        dist.all_reduce(count)
        n = count.item()
        c = xs.shape[1]
        mean = total[:c] / n
        var = (total[c:] / n - mean * mean).clamp_min(0.0)
        z = (xs - mean.to(xs.dtype).view(1, c, 1)) * torch.rsqrt(var + self.eps).to(xs.dtype).view(1, c, 1)
        with torch.no_grad():
            self.num_batches_tracked.add_(1)
            m = self.momentum if self.momentum is not None else 1.0 / float(self.num_batches_tracked)
            unbiased = var * (n / max(n - 1.0, 1.0))
            self.running_mean.mul_(1 - m).add_(mean.to(self.running_mean.dtype), alpha=m)
            self.running_var.mul_(1 - m).add_(unbiased.to(self.running_var.dtype), alpha=m)
        return z


#: Batch-statistic norms with no synchronised form (their statistics stay per rank under DDP).
_UNSYNCED = ("GhostBatchNorm", "PowerNorm", "UnifiedNorm", "OnlineNorm", "BatchChannelNorm")


def sync_batchnorm(model: nn.Module) -> nn.Module:
    """Make every normbench ``BatchNorm`` in ``model`` a :class:`SyncBatchNorm` (in place; returns ``model``).

    Raises ``ValueError`` for a batch-statistic norm that cannot be synchronised, and for torch's own BatchNorm
    layers (normbench's models use normbench's norms; convert those with ``torch.nn.SyncBatchNorm`` on GPUs).
    """
    for name, m in model.named_modules():
        kind = type(m).__name__
        if type(m) is BatchNorm:
            m.__class__ = SyncBatchNorm
        elif kind in _UNSYNCED:
            raise ValueError(f"--sync-bn: {kind} ({name}) has no synchronised form; under torchrun it normalises "
                             "each rank's local batch. Train it without --sync-bn (docs/scale-out.md)")
        elif isinstance(m, nn.modules.batchnorm._BatchNorm) and not isinstance(m, nn.SyncBatchNorm):
            raise ValueError(f"--sync-bn: {name} is torch's {kind}, not normbench's BatchNorm; use "
                             "torch.nn.SyncBatchNorm.convert_sync_batchnorm (GPU only)")
    return model
