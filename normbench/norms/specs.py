"""The built-in NormSpecs. Each is published through the ``normbench.norms`` entry-point group, like any plugin."""

from __future__ import annotations

from normbench.registry import Backend, NormSpec, Paper, triton_devices

_M = "normbench.norms."


def _arxiv(arxiv_id: str) -> str:
    return f"https://arxiv.org/abs/{arxiv_id}"


_K = "normbench.kernels."
#: The kernel modules each Triton backend runs (``triton_backend`` dispatches to them), for its implementation hash.
_TRITON_KERNELS = {
    **dict.fromkeys(("layernorm", "rmsnorm", "srmsnorm", "crmsnorm", "scalenorm", "add_layernorm", "add_rmsnorm"),
                    ("_rownorm", "_rowmath")),
    "dyt": ("_pointwise",), "derf": ("_pointwise",), "groupnorm": ("_groupnorm",),
}


def _triton(name: str) -> tuple[Backend, ...]:
    """The fused Triton backend, built lazily so importing the registry never imports Triton."""
    return (
        Backend(
            "triton",
            build=f"{_K}triton_backend:build_{name}",
            available=f"{_K}triton_backend:unavailable",
            sources=(*(_K + k for k in _TRITON_KERNELS[name]), _K + "_common", _K + "_env"),
            devices=triton_devices,
        ),
    )


LN_PAPER = Paper("Layer Normalization", "Ba, Kiros, Hinton", 2016, _arxiv("1607.06450"))
TWT_PAPER = Paper("Transformers without Tears: Improving the Normalization of Self-Attention",
                  "Nguyen, Salazar", 2019, _arxiv("1910.05895"))
EVO_PAPER = Paper("Evolving Normalization-Activation Layers", "Liu, Brock, Simonyan, Le", 2020, _arxiv("2004.02967"))
BCN_PAPER = Paper("Micro-Batch Training with Batch-Channel Normalization and Weight Standardization",
                  "Qiao, Wang, Liu, Shen, Yuille", 2019, _arxiv("1903.10520"))

LAYERNORM = NormSpec(
    name="layernorm", title="LayerNorm", paper=LN_PAPER, family="features", kind="activation",
    layouts=("tokens", "images"), factory=_M + "features:LayerNorm",
    formula="y = γ·(x − mean(x)) / sqrt(var(x) + ε) + β   (statistics over the C features; images: per pixel over C)",
    extra_backends=_triton("layernorm"),
)
RMSNORM = NormSpec(
    name="rmsnorm", title="RMSNorm",
    paper=Paper("Root Mean Square Layer Normalization", "Zhang, Sennrich", 2019, _arxiv("1910.07467")),
    family="features", kind="activation", layouts=("tokens", "images"), factory=_M + "features:RMSNorm",
    formula="y = γ·x / sqrt(mean(x²) + ε)", extra_backends=_triton("rmsnorm"),
)
CRMSNORM = NormSpec(
    name="crmsnorm", title="CRMSNorm",
    paper=Paper("Pre-RMSNorm and Pre-CRMSNorm Transformers: Equivalent and Efficient Pre-LN Transformers",
                "Jiang, Gu, Zhu, Pan", 2023, _arxiv("2305.14858")),
    family="features", kind="activation", layouts=("tokens", "images"), factory=_M + "features:CRMSNorm",
    formula="x = first d−1 entries of a zero-mean d-vector (d = C+1): y = γ·x / sqrt((Σx_i² + (Σx_i)²)/d + ε)",
    extra_backends=_triton("crmsnorm"),
)
SRMSNORM = NormSpec(
    name="srmsnorm", title="Simple RMSNorm (SRMSNorm)",
    paper=Paper("Scaling TransNormer to 175 Billion Parameters", "Qin et al.", 2023, _arxiv("2307.14995")),
    family="features", kind="activation", layouts=("tokens", "images"), factory=_M + "features:SRMSNorm",
    formula="y = x / (‖x‖₂/√d)   (no parameters; ε inside the root)",
    extra_backends=_triton("srmsnorm"),
)
SCALENORM = NormSpec(
    name="scalenorm", title="ScaleNorm", paper=TWT_PAPER, family="features", kind="activation",
    layouts=("tokens", "images"), factory=_M + "features:ScaleNorm",
    formula="y = g·x / max(‖x‖₂, ε), one learned scalar g initialised to √C", extra_backends=_triton("scalenorm"),
)
LAYERNORM_SCALING = NormSpec(
    name="layernorm_scaling", title="LayerNorm Scaling",
    paper=Paper("The Curse of Depth in Large Language Models", "Sun et al.", 2025, _arxiv("2502.05795")),
    family="features", kind="activation", layouts=("tokens",), factory=_M + "features:LayerNormScaling",
    formula="y = LN(x) / √ℓ for the layer at 1-based depth ℓ (pass depth=ℓ)",
    default_kwargs={"depth": 1}, notes="needs the layer depth: spec.create(C, depth=ℓ)",
)
ADD_LAYERNORM = NormSpec(
    name="add_layernorm", title="Residual add + LayerNorm", paper=LN_PAPER, family="features", kind="residual",
    layouts=("tokens",), factory=_M + "features:AddLayerNorm",
    formula="s = x + r; y = LN(s); returns (y, s) as a pre-norm transformer block needs",
    extra_backends=_triton("add_layernorm"),
)
ADD_RMSNORM = NormSpec(
    name="add_rmsnorm", title="Residual add + RMSNorm", paper=RMSNORM.paper, family="features", kind="residual",
    layouts=("tokens",), factory=_M + "features:AddRMSNorm",
    formula="s = x + r; y = γ·s / sqrt(mean(s²) + ε); returns (y, s)",
    extra_backends=_triton("add_rmsnorm"),
)
GROUPNORM = NormSpec(
    name="groupnorm", title="GroupNorm",
    paper=Paper("Group Normalization", "Wu, He", 2018, _arxiv("1803.08494")),
    family="groups", kind="activation", layouts=("images",), factory=_M + "groups:GroupNorm",
    formula="per sample and group g of G (32, or the largest divisor of C ≤ 32): y = γ·(x − μ_g)/sqrt(σ_g² + ε) + β over (C/G, H, W)",
    extra_backends=_triton("groupnorm"),
)
INSTANCENORM = NormSpec(
    name="instancenorm", title="InstanceNorm",
    paper=Paper("Instance Normalization: The Missing Ingredient for Fast Stylization", "Ulyanov, Vedaldi, Lempitsky",
                2016, _arxiv("1607.08022")),
    family="groups", kind="activation", layouts=("images",), factory=_M + "groups:InstanceNorm",
    formula="per (n, c): y = γ·(x − μ)/sqrt(σ² + ε) + β over (H, W)",
)
EVONORM_S0 = NormSpec(
    name="evonorm_s0", title="EvoNorm-S0", paper=EVO_PAPER, family="groups", kind="activation",
    layouts=("images",), factory=_M + "groups:EvoNormS0",
    formula="y = x·sigmoid(v·x) / sqrt(var over (C/G, H, W) + ε) · γ + β",
)
EVONORM_B0 = NormSpec(
    name="evonorm_b0", title="EvoNorm-B0", paper=EVO_PAPER, family="groups", kind="activation",
    layouts=("images",), factory=_M + "groups:EvoNormB0", batch_dependent=True, running_state=True,
    formula="y = x / max(sqrt(var over (N, H, W) + ε), v·x + sqrt(var over (H, W) + ε)) · γ + β; running batch variance in eval",
)
BATCHNORM = NormSpec(
    name="batchnorm", title="BatchNorm",
    paper=Paper("Batch Normalization: Accelerating Deep Network Training by Reducing Internal Covariate Shift",
                "Ioffe, Szegedy", 2015, _arxiv("1502.03167")),
    family="batch", kind="activation", layouts=("tokens", "images"), factory=_M + "batch:BatchNorm",
    batch_dependent=True, running_state=True,
    formula="per channel over (N, H, W) (tokens: over all tokens): y = γ·(x − μ_B)/sqrt(σ_B² + ε) + β; running μ, σ² in eval",
)
GHOST_BATCHNORM = NormSpec(
    name="ghost_batchnorm", title="Ghost BatchNorm",
    paper=Paper("Train longer, generalize better: closing the generalization gap in large batch training",
                "Hoffer, Hubara, Soudry", 2017, _arxiv("1705.08741")),
    family="batch", kind="activation", layouts=("tokens", "images"), factory=_M + "batch:GhostBatchNorm",
    batch_dependent=True, running_state=True,
    formula="BatchNorm whose training statistics come from each virtual sub-batch of size B_v (default 16)",
)
POWERNORM = NormSpec(
    name="powernorm", title="PowerNorm",
    paper=Paper("PowerNorm: Rethinking Batch Normalization in Transformers", "Shen, Yao, Gholami, Mahoney, Keutzer",
                2020, _arxiv("2003.07845")),
    family="batch", kind="activation", layouts=("tokens", "images"), factory=_M + "batch:PowerNorm",
    batch_dependent=True, running_state=True,
    formula="ψ_B² = mean over batch of x²; y = γ·x/ψ_{t−1} + β; running ψ² with momentum; approximate backward",
    notes="ψ₀ is undefined in Algorithm 1: the first warmup_iters (default 1) steps divide by their own batch ψ",
)
UNIFIED_NORM = NormSpec(
    name="unified_norm", title="Unified Normalization",
    paper=Paper("Unified Normalization for Accelerating and Stabilizing Transformers", "Yang et al.", 2022,
                _arxiv("2208.01313")),
    family="batch", kind="activation", layouts=("tokens", "images"), factory=_M + "batch:UnifiedNorm",
    batch_dependent=True, running_state=True,
    formula="per channel, no centring: y = γ·x / sqrt(geometric mean of the last M batch second moments + ε) + β, "
            "with outlier filtration (an outlier batch uses its own statistic; the running value replaces it in the window)",
    notes="follows the authors' code (window 4, momentum 0.9); their code-only gradient compensation is left out",
)
ONLINE_NORM = NormSpec(
    name="online_norm", title="Online Normalization",
    paper=Paper("Online Normalization for Training Neural Networks", "Chiley et al.", 2019, _arxiv("1905.05894")),
    family="batch", kind="activation", layouts=("tokens", "images"), factory=_M + "batch:OnlineNorm",
    batch_dependent=True, running_state=True,
    formula="per feature running μ, σ² updated sample by sample (decay α_f); y = γ·(x − μ_{t−1})/σ_{t−1} + β; "
            "gradient de-biased with decaying error accumulators (decay α_b); activation clamping at ±5 (authors' default)",
)
BATCH_CHANNEL_NORM = NormSpec(
    name="batch_channel_norm", title="Batch-Channel Normalization", paper=BCN_PAPER, family="batch",
    kind="activation", layouts=("images",), factory=_M + "batch:BatchChannelNorm",
    batch_dependent=True, running_state=True,
    formula="BN with estimated (running) statistics, then GroupNorm over channel groups",
)
DYT = NormSpec(
    name="dyt", title="Dynamic Tanh (DyT)",
    paper=Paper("Transformers without Normalization", "Zhu, Chen, He, LeCun, Liu", 2025, _arxiv("2503.10622")),
    family="pointwise", kind="activation", layouts=("tokens", "images"), factory=_M + "pointwise:DyT",
    formula="y = γ·tanh(α·x) + β, scalar α initialised to 0.5", extra_backends=_triton("dyt"),
)
DERF = NormSpec(
    name="derf", title="Dynamic erf (Derf)",
    paper=Paper("Stronger Normalization-Free Transformers", "Chen, Lu, Zhu, Sun, Liu", 2025, _arxiv("2512.10938")),
    family="pointwise", kind="activation", layouts=("tokens", "images"), factory=_M + "pointwise:Derf",
    formula="y = γ·erf(α·x + s) + β, learned scalars α (init 0.5) and s (init 0)",
    notes="α = 0.5 and s = 0 at init follow DyT; the paper's own init was not confirmed from its text here",
    extra_backends=_triton("derf"),
)
NONE = NormSpec(
    name="none", title="No normalization (identity)",
    paper=Paper("Fixup Initialization: Residual Learning Without Normalization", "Zhang, Dauphin, Ma", 2019,
                _arxiv("1901.09321")),
    family="baseline", kind="activation", layouts=("tokens", "images"), factory=_M + "pointwise:NoNorm",
    formula="y = x (no-norm baseline; models add Fixup, SkipInit or NF scaled WS + AGC around it)",
)
WEIGHT_NORM = NormSpec(
    name="weight_norm", title="Weight Normalization",
    paper=Paper("Weight Normalization: A Simple Reparameterization to Accelerate Training of Deep Neural Networks",
                "Salimans, Kingma", 2016, _arxiv("1602.07868")),
    family="weight", kind="weight", layouts=("tokens", "images"), factory=_M + "weights:weight_norm",
    formula="w = g·v/‖v‖ per output unit",
)
WEIGHT_STD = NormSpec(
    name="weight_std", title="Weight Standardization", paper=BCN_PAPER, family="weight", kind="weight",
    layouts=("tokens", "images"), factory=_M + "weights:weight_std",
    formula="Ŵ = (W − mean(W)) / sqrt(var(W) + ε) per output channel",
)
SCALED_WS = NormSpec(
    name="scaled_ws", title="Scaled Weight Standardization (NF)",
    paper=Paper("Characterizing signal propagation to close the performance gap in unnormalized ResNets",
                "Brock, De, Smith", 2021, _arxiv("2101.08692")),
    family="weight", kind="weight", layouts=("tokens", "images"), factory=_M + "weights:scaled_ws",
    formula="Ŵ = gain·(W − mean(W)) / (std(W)·√fan_in), learned gain per output channel; pairs with adaptive gradient clipping",
)
SPECTRAL_NORM = NormSpec(
    name="spectral_norm", title="Spectral Normalization",
    paper=Paper("Spectral Normalization for Generative Adversarial Networks", "Miyato, Kataoka, Koyama, Yoshida",
                2018, _arxiv("1802.05957")),
    family="weight", kind="weight", layouts=("tokens", "images"), factory=_M + "weights:spectral_norm",
    running_state=True, formula="Ŵ = W/σ(W), σ estimated by one power iteration per training step",
    notes="u, v start at the exact top singular pair (SVD at wrap time), not random",
)
SIGMA_REPARAM = NormSpec(
    name="sigma_reparam", title="σReparam",
    paper=Paper("Stabilizing Transformer Training by Preventing Attention Entropy Collapse", "Zhai et al.", 2023,
                _arxiv("2303.06296")),
    family="weight", kind="weight", layouts=("tokens", "images"), factory=_M + "weights:sigma_reparam",
    running_state=True, formula="Ŵ = (γ/σ(W))·W with a learned scalar γ, σ by power iteration",
    notes="γ starts at σ(W₀) so Ŵ = W at init (the authors' PyTorch code); u, v start at the top singular pair",
)
QK_NORM = NormSpec(
    name="qk_norm", title="QK-Norm",
    paper=Paper("Query-Key Normalization for Transformers", "Henry, Dachapally, Pawar, Chen", 2020,
                _arxiv("2010.04245")),
    family="attention", kind="attention", layouts=("tokens",), factory=_M + "attention:QKNorm",
    formula="q̂ = q/‖q‖, k̂ = k/‖k‖ over the head dimension; logits = g·q̂·k̂ᵀ with a learned scalar g instead of 1/√d",
    notes="g starts at log2(L²−L) for training length L (seq_len, default 256); returns (g·q̂, k̂), so attention "
          "must use scale=1.0",
)
FIXNORM = NormSpec(
    name="fixnorm", title="FixNorm", paper=TWT_PAPER, family="attention", kind="activation",
    layouts=("tokens",), factory=_M + "attention:FixNorm",
    formula="y = r·x/‖x‖₂: embeddings scaled to a fixed length r (default 1)",
)
NGPT = NormSpec(
    name="ngpt", title="nGPT hypersphere normalization",
    paper=Paper("nGPT: Normalized Transformer with Representation Learning on the Hypersphere",
                "Loshchilov, Hsieh, Sun, Ginsburg", 2024, _arxiv("2410.01131")),
    family="attention", kind="activation", layouts=("tokens",), factory=_M + "attention:HypersphereNorm",
    formula="y = x/‖x‖₂ (every hidden vector on the unit sphere); the model updates h ← Norm(h + α⊙(Norm(block(h)) − h))",
    notes="the residual update NGPTResidual and renormalize_ live in normbench.norms.attention",
)

SOFTMAX_PAPER = Paper("The Two-Pass Softmax Algorithm", "Dukhan, Ablavatski", 2020, _arxiv("2001.04438"))


def _softmax_backends() -> tuple[Backend, ...]:
    """One backend per algorithm: explicit formulations under torch.compile, and the Triton kernels."""
    compiled = tuple(Backend(f"compile_{a}", build=f"{_K}softmax_compiled:build_compile_{a}",
                             available=f"{_K}softmax_compiled:compile_unavailable", sources=(_K + "_softmax_module",))
                     for a in ("three_pass", "two_pass"))
    kernels = tuple(Backend(f"triton_{a}", build=f"{_K}softmax_backend:build_{a}",
                            available=f"{_K}softmax_backend:unavailable",
                            sources=(_K + "_softmax", _K + "_softmax_module", _K + "_common", _K + "_env"),
                            devices=triton_devices)
                    for a in ("three_pass", "online", "two_pass"))
    return compiled + kernels


_SOFTMAX_NOTES = ("backends are the algorithms (docs/softmax.md); a row of all −inf gives NaN, as torch.softmax "
                  "in float64 does; benchmarked on the softmax shape set only, never trained as a layer norm")
SOFTMAX = NormSpec(
    name="softmax", title="Softmax", paper=SOFTMAX_PAPER, family="softmax", kind="softmax", layouts=("tokens",),
    factory=_M + "softmax:Softmax", formula="y_i = exp(x_i − max x) / Σ_k exp(x_k − max x) over the last axis",
    notes=_SOFTMAX_NOTES, extra_backends=_softmax_backends(),
)
LOG_SOFTMAX = NormSpec(
    name="log_softmax", title="Log-softmax", paper=SOFTMAX_PAPER, family="softmax", kind="softmax",
    layouts=("tokens",), factory=_M + "softmax:LogSoftmax",
    formula="y_i = x_i − max x − log Σ_k exp(x_k − max x) over the last axis (cross-entropy's log-probabilities)",
    notes=_SOFTMAX_NOTES, extra_backends=_softmax_backends(),
)

ALL: tuple[NormSpec, ...] = tuple(v for v in dict(globals()).values() if isinstance(v, NormSpec))
