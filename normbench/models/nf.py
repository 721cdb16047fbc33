"""Normalization-free ResNet baselines: Fixup, SkipInit and NF-ResNet (scaled weight standardization + AGC).

Same stage layout as the task's timm ResNet preset (BasicBlocks, same widths), so the only difference from the
normalized ResNet is how the signal is kept in range without activation norms:

- Fixup (Zhang, Dauphin, Ma 2019, arXiv 1901.09321): scalar biases before each conv and activation, a scalar
  multiplier per branch, the last conv of each branch and the classifier initialised to zero, the first conv
  scaled by L^(-1/2) (L residual branches, m = 2 layers per branch).
- SkipInit (De, Smith 2020, arXiv 2002.10444): each branch multiplied by a learned scalar initialised to 0.
- NF-ResNet (Brock, De, Smith 2021, arXiv 2101.08692): h <- h + alpha * f(h / beta) with beta the analytic
  std of h, alpha = 0.2, convs reparameterised by the weight norm under test (scaled WS by default),
  ReLU scaled by its gamma = sqrt(2 / (1 - 1/pi)); training adds adaptive gradient clipping (NFNets,
  arXiv 2102.06171) through the recipe.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from normbench.models.timm_models import RESNET_PRESETS, preset_for

RELU_GAMMA = math.sqrt(2.0 / (1.0 - 1.0 / math.pi))


class _Stem(nn.Module):
    """The stem conv (+ pool); Fixup's has a scalar bias and a ReLU after the conv, as in its official code."""

    def __init__(self, out_ch: int, stem: str, conv, fixup: bool = False):
        super().__init__()
        if stem == "imagenet":
            self.conv = conv(3, out_ch, 7, 2, 3)
            self.pool = nn.MaxPool2d(3, 2, 1)
        else:
            self.conv = conv(3, out_ch, 3, 1, 1)
            self.pool = nn.MaxPool2d(3, 2, 1) if stem == "small_pool" else nn.Identity()
        self.bias = nn.Parameter(torch.zeros(())) if fixup else None

    def forward(self, x):
        x = self.conv(x)
        if self.bias is not None:
            x = F.relu(x + self.bias)
        return self.pool(x)


class _PadShortcut(nn.Module):
    """Fixup's CIFAR shortcut (official code): stride-s subsampling, then zero channels appended (no weights)."""

    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.stride, self.extra = stride, cout - cin

    def forward(self, x):
        x = x[:, :, ::self.stride, ::self.stride]
        return F.pad(x, (0, 0, 0, 0, 0, self.extra))


class SkipInitBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1)
        self.shortcut = nn.Conv2d(cin, cout, 1, stride) if (stride != 1 or cin != cout) else None
        self.gain = nn.Parameter(torch.zeros(()))

    def forward(self, x):
        out = F.relu(x)
        sc = self.shortcut(out) if self.shortcut is not None else x
        return sc + self.gain * self.conv2(F.relu(self.conv1(out)))


class FixupBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.bias1a, self.bias1b, self.bias2a, self.bias2b = (nn.Parameter(torch.zeros(())) for _ in range(4))
        self.scale = nn.Parameter(torch.ones(()))
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.shortcut = None
        if stride != 1 or cin != cout:
            # The official CIFAR code pads channels with zeros; where the widths do not double, a 1x1 conv (as in
            # its ImageNet code).
            self.shortcut = (_PadShortcut(cin, cout, stride) if cout >= cin
                             else nn.Conv2d(cin, cout, 1, stride, bias=False))

    def forward(self, x):
        out = F.relu(self.conv1(x + self.bias1a) + self.bias1b)
        out = self.conv2(out + self.bias2a) * self.scale + self.bias2b
        sc = self.shortcut(x + self.bias1a) if self.shortcut is not None else x
        return F.relu(out + sc)


class NFBlock(nn.Module):
    """h_out = shortcut(h/beta) + alpha * gain * conv2(relu(conv1(relu(h/beta)))), convs weight-normalised."""

    def __init__(self, cin, cout, stride, beta, alpha, conv):
        super().__init__()
        self.beta, self.alpha = beta, alpha
        self.conv1 = conv(cin, cout, 3, stride, 1)
        self.conv2 = conv(cout, cout, 3, 1, 1)
        self.shortcut = conv(cin, cout, 1, stride, 0) if (stride != 1 or cin != cout) else None
        self.gain = nn.Parameter(torch.zeros(()))  # SkipInit gain, as in NF-ResNets

    def forward(self, x):
        out = F.relu(x / self.beta) * RELU_GAMMA
        sc = self.shortcut(out) if self.shortcut is not None else x
        out = self.conv2(F.relu(self.conv1(out)) * RELU_GAMMA)
        return sc + self.alpha * self.gain * out


class NormFreeResNet(nn.Module):
    """The three baselines behind one constructor: ``variant`` in ``fixup``, ``skipinit``, ``nf``."""

    def __init__(self, variant: str, image_size: int, num_classes: int, weight_spec=None, alpha: float = 0.2,
                 layers=None, channels=None):
        super().__init__()
        p = preset_for(RESNET_PRESETS, image_size)
        layers = tuple(layers or p.layers)
        channels = tuple(channels or p.channels)
        self.variant = variant
        self.wrapped = 0
        if variant == "nf":
            if weight_spec is None:
                raise ValueError("the NF-ResNet needs a weight norm for its convs (default scaled_ws)")

            def conv(cin, cout, k, s, pad):
                self.wrapped += 1
                return weight_spec.create(cout, layout="images", layer=nn.Conv2d(cin, cout, k, s, pad))
        else:
            def conv(cin, cout, k, s, pad):
                return nn.Conv2d(cin, cout, k, s, pad, bias=variant != "fixup")
        self.stem = _Stem(channels[0], p.stem, conv, fixup=variant == "fixup")
        blocks = []
        cin, expected_var = channels[0], 1.0
        n_branches = sum(layers)
        for stage, (n, cout) in enumerate(zip(layers, channels)):
            for i in range(n):
                stride = 2 if (stage > 0 and i == 0) else 1
                if variant == "skipinit":
                    blocks.append(SkipInitBlock(cin, cout, stride))
                elif variant == "fixup":
                    blocks.append(FixupBlock(cin, cout, stride))
                elif variant == "nf":
                    transition = stride != 1 or cin != cout
                    if transition:
                        expected_var = 1.0  # the shortcut sees h/beta, so the variance restarts at 1
                    blocks.append(NFBlock(cin, cout, stride, math.sqrt(expected_var), alpha, conv))
                    expected_var += alpha ** 2
                else:
                    raise ValueError(f"unknown normalization-free variant {variant!r}")
                cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, num_classes)
        # Fixup: a scalar bias before the classifier.
        self.bias_fc = nn.Parameter(torch.zeros(())) if variant == "fixup" else None
        self.config = {"arch": f"{variant}-resnet", "layers": list(layers), "channels": list(channels),
                       "stem": p.stem, **({"alpha": alpha, "wrapped_layers": self.wrapped} if variant == "nf" else {})}
        self._init(n_branches)

    @torch.no_grad()
    def _init(self, n_branches: int):
        if self.variant == "fixup":
            for m in self.modules():
                if isinstance(m, nn.Conv2d) and m is not self.stem.conv:  # the official code keeps torch's stem init
                    nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            for b in self.blocks:
                b.conv1.weight.mul_(n_branches ** -0.5)  # L^(-1/(2m-2)) with m = 2
                nn.init.zeros_(b.conv2.weight)
            nn.init.zeros_(self.fc.weight)
            nn.init.zeros_(self.fc.bias)
        elif self.variant == "skipinit":
            for m in self.modules():
                if isinstance(m, nn.Conv2d):
                    nn.init.kaiming_normal_(m.weight, mode="fan_in", nonlinearity="relu")
                    nn.init.zeros_(m.bias)
        else:
            nn.init.zeros_(self.fc.weight)  # NF-ResNets zero-initialise the classifier
            nn.init.zeros_(self.fc.bias)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        if self.variant == "skipinit":
            x = F.relu(x)
        elif self.variant == "nf":
            x = F.relu(x) * RELU_GAMMA
        x = x.mean((2, 3))
        return self.fc(x + self.bias_fc if self.bias_fc is not None else x)

    def lr_scales(self) -> dict:
        """Per-parameter learning-rate multipliers: Fixup's official code trains its scalar biases and multipliers
        at a tenth of the base rate."""
        if self.variant != "fixup":
            return {}
        return {id(p): 0.1 for name, p in self.named_parameters() if "bias" in name or name.endswith("scale")}
