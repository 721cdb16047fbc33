"""Compile the Triton kernels ahead of time for a GPU target, with no GPU, and report registers and spills.

``python -m normbench.kernels.aot [--arch 90] [--quick]`` builds each kernel at the block sizes and warp counts the
launchers' heuristics pick (default target sm_90, the H100/H200) with Triton's bundled ptxas, then runs
``ptxas -v`` on the PTX for the register and spill counts. It catches what Triton's CPU interpreter cannot
(compile errors, register spills) on a machine without a GPU. Run it without ``TRITON_INTERPRET``.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile


def _cases(quick: bool):
    """(label, kernel, argument values, num_warps); pointer arguments are "x" (input dtype) or "fp32"."""
    from normbench.kernels import _groupnorm as GN
    from normbench.kernels import _pointwise as PW
    from normbench.kernels import _rownorm as R
    from normbench.kernels._common import col_block, next_pow2, warps_for

    out = []
    row_modes = {0: "layernorm", 1: "rmsnorm", 2: "crmsnorm", 3: "scalenorm"}
    # quick: 8192 is the widest fused backward, the first to spill when its register budget (64) is passed
    widths = (4096, 8192) if quick else (128, 1024, 4096, 8192, 16384)
    for mode in ((0, 3) if quick else (0, 1, 2, 3)):
        for res in ((False, True) if mode in (0, 1) else (False,)):
            for images, C in [(False, c) for c in widths] + [(True, c) for c in ((512,) if quick else (64, 512, 1024))]:
                if images and res:
                    continue
                HW = 3136 if images else 1
                bc = next_pow2(C)
                br = R._fwd_rows({"TILE": R.FWD_TILE, "BLOCK_C": bc, "IMAGES": images, "M": 1 << 16, "HW": HW})
                vals = dict(X="x", R="x", W="fp32", B="fp32", Y="x", S="x", M=1 << 16, C=C,
                            HW=HW, eps=1e-5, MODE=mode, IMAGES=images, HAS_RES=res, HAS_W=mode != 3, HAS_B=mode == 0,
                            SCALAR_W=mode == 3, TILE=R.FWD_TILE,
                            BLOCK_R=br, BLOCK_C=bc)
                tag = f"{row_modes[mode]}{'+res' if res else ''} {'images' if images else 'tokens'} C={C}"
                out.append((f"row fwd  {tag} [{br}x{bc}]", R._row_fwd_kernel, vals, warps_for(br * bc, 16, 4)))
                if bc > R.MAX_FUSED_C_BWD:
                    continue
                if images:
                    br = min(max(R.BWD_TILE // bc, min(16, 8192 // bc)), next_pow2(HW))
                else:
                    br = max(1, R.BWD_TILE // bc)
                vals = dict(X="x", W="fp32", DY="x", DS="x", DX="x", COEF="fp32",
                            DW_PART="fp32", DB_PART="fp32", DSW_PART="fp32", M=1 << 16, C=C, HW=HW, n_tiles=1 << 14,
                            PART_ROW=2 * C, B_OFF=C, SW_OFF=528 * C, eps=1e-5,
                            MODE=mode, IMAGES=images, HAS_W=mode != 3, HAS_B=mode == 0, SCALAR_W=mode == 3,
                            HAS_DS=res, HAS_COEF=False, COMPUTE_DW=True, BLOCK_R=br, BLOCK_C=bc)
                out.append((f"row bwd  {tag} [{br}x{bc}]", R._row_bwd_kernel, vals,
                            warps_for(br * bc, 16 if images else 8, 4)))
        wide = dict(C=1 << 16, MODE=mode, BLOCK_C=R.WIDE_CHUNK)
        out.append((f"row wide fwd   {row_modes[mode]}", R._row_fwd_wide_kernel,
                    dict(X="x", R="x", W="fp32", B="fp32", Y="x", S="x", M=64, HW=1, eps=1e-5, HAS_RES=mode in (0, 1),
                         HAS_W=mode != 3, HAS_B=mode == 0, SCALAR_W=mode == 3, **wide), 8))
        out.append((f"row wide coef  {row_modes[mode]}", R._row_coef_kernel,
                    dict(X="x", W="fp32", DY="x", COEF="fp32", M=64, eps=1e-5, HAS_W=mode != 3,
                         SCALAR_W=mode == 3, **wide), 8))
        bc = R.WIDE_CHUNK
        out.append((f"row wide bwd   {row_modes[mode]} [1x{bc}]", R._row_bwd_kernel,
                    dict(X="x", W="fp32", DY="x", DS="x", DX="x", COEF="fp32",
                         DW_PART="fp32", DB_PART="fp32", DSW_PART="fp32", M=64, C=1 << 16, HW=1, n_tiles=64,
                         PART_ROW=1 << 17, B_OFF=1 << 16, SW_OFF=1 << 22, eps=1e-5,
                         MODE=mode, IMAGES=False, HAS_W=mode != 3, HAS_B=mode == 0, SCALAR_W=mode == 3, HAS_DS=False,
                         HAS_COEF=True, COMPUTE_DW=True, BLOCK_R=1, BLOCK_C=bc), warps_for(bc, 8, 4)))
        out.append((f"row wide bwd fused {row_modes[mode]} [1x{bc}]", R._row_bwd_wide_kernel,
                    dict(X="x", W="fp32", DY="x", DS="x", DX="x", DW_PART="fp32",
                         DB_PART="fp32", DSW_PART="fp32", M=64, C=1 << 16, PART_ROW=1 << 17, B_OFF=1 << 16,
                         SW_OFF=1 << 22, eps=1e-5, MODE=mode, HAS_W=mode != 3,
                         HAS_B=mode == 0, SCALAR_W=mode == 3, HAS_DS=mode == 1, COMPUTE_DW=True, BLOCK_C=bc), 8))

    for kind, name in ((0, "dyt"), (1, "derf")):
        for images, ncols in ((False, 4096), (True, 3136)):
            bc = col_block(ncols)
            br = PW._fwd_rows({"TILE": PW.FWD_TILE, "BLOCK_C": bc, "NROWS": 1 << 16})
            vals = dict(X="x", W="fp32", B="fp32", A="fp32", SH="fp32", Y="x", NROWS=1 << 16, NCOLS=ncols, C=256,
                        KIND=kind, CH_ON_ROWS=images, TILE=PW.FWD_TILE, BLOCK_R=br, BLOCK_C=bc)
            lay = "images" if images else "tokens"
            out.append((f"pointwise fwd {name} {lay} [{br}x{bc}]", PW._pw_fwd_kernel, vals, warps_for(br * bc, 16, 4)))
            br = max(1, PW.BWD_TILE // bc)
            common = dict(X="x", W="fp32", A="fp32", SH="fp32", DY="x", DX="x", KIND=kind, BLOCK_R=br, BLOCK_C=bc)
            if images:
                vals = dict(PART="fp32", NROWS=1 << 14, HW=ncols, C=256, HW_PER_SPLIT=ncols, SOFF=1 << 18, S=1 << 10,
                            **common)
                kernel = PW._pw_bwd_rows_kernel
            else:
                vals = dict(DW_PART="fp32", DB_PART="fp32", DA_PART="fp32", DS_PART="fp32", NROWS=1 << 16, C=ncols,
                            n_tiles=1 << 12, PART_ROW=2 * ncols, B_OFF=ncols, A_OFF=1 << 20, S_OFF=(1 << 20) + 528,
                            **common)
                kernel = PW._pw_bwd_cols_kernel
            out.append((f"pointwise bwd {name} {lay} [{br}x{bc}]", kernel, vals, warps_for(br * bc, 8, 2)))

    from normbench.kernels import _common

    for nv, ns in (((2, 2),) if quick else ((2, 0), (1, 0), (2, 2), (0, 1))):
        bc = 32 if nv else 16
        out.append((f"final sums of partials {nv} vectors, {ns} scalars", _common._sum_parts_kernel,
                    dict(PART="fp32", OV0="x", OV1="x", OS0="x", OS1="x", P=264, C=4096, K=nv * 4096,
                         SOFF=264 * nv * 4096, S=528, N_VB=128, NV=nv, NS=ns, BLOCK_P=4096 // bc, BLOCK_C=bc),
                    8))

    gn = dict(C=256, G=32)
    out.append(("groupnorm fwd fused [8x1024]", GN._gn_fwd_fused_kernel,
                dict(X="x", W="fp32", B="fp32", Y="x", MEAN="fp32", RSTD="fp32", HW=1024, eps=1e-5, HAS_W=True,
                     HAS_B=True, STORE_STATS=True, BLOCK_CPG=8, BLOCK_HW=1024, **gn), warps_for(8192, 16, 4)))
    out.append(("groupnorm bwd fused [8x1024]", GN._gn_bwd_fused_kernel,
                dict(X="x", W="fp32", DY="x", DX="x", MEAN="fp32", RSTD="fp32", DS_NC="fp32", DB_NC="fp32", HW=1024,
                     HAS_W=True, BLOCK_CPG=8, BLOCK_HW=1024, **gn), warps_for(8192, 8, 4)))
    bh = col_block(3136)
    bc = max(1, min(8, GN.TILE // bh))
    out.append((f"groupnorm stats split [{bc}x{bh}]", GN._gn_stats_kernel,
                dict(X="x", PART="fp32", HW=3136, HW_PER_SPLIT=3136, BLOCK_CPG=bc, BLOCK_HW=bh, **gn),
                warps_for(bc * bh, 8, 4)))
    out.append((f"groupnorm fwd split [{bc}x{bh}]", GN._gn_fwd_split_kernel,
                dict(X="x", W="fp32", B="fp32", Y="x", PART="fp32", MEAN="fp32", RSTD="fp32", HW=3136, eps=1e-5,
                     HW_PER_SPLIT=3136, HAS_W=True, HAS_B=True, STORE_STATS=True, BLOCK_SPLIT=4, BLOCK_CPG=bc,
                     BLOCK_HW=bh, **gn), warps_for(bc * bh, 8, 4)))
    br = GN.TILE // bh
    out.append((f"groupnorm bwd reduce [{br}x{bh}]", GN._gn_bwd_reduce_kernel,
                dict(X="x", DY="x", MEAN="fp32", RSTD="fp32", DS_PART="fp32", DB_PART="fp32", NC=1 << 13, HW=3136,
                     CPG=8, HW_PER_SPLIT=3136, BLOCK_R=br, BLOCK_HW=bh), warps_for(br * bh, 8, 4)))
    out.append((f"groupnorm bwd dx [{br}x{bh}]", GN._gn_bwd_dx_kernel,
                dict(X="x", W="fp32", DY="x", DX="x", MEAN="fp32", RSTD="fp32", C1="fp32", C2="fp32", NC=1 << 13,
                     HW=3136, C=256, CPG=8, HAS_W=True, BLOCK_R=br, BLOCK_HW=bh), warps_for(br * bh, 8, 4)))
    out += _softmax_cases(quick)
    return out


def _softmax_cases(quick: bool):
    """The softmax kernels at the launcher's block sizes and warps: on-chip rows and the looped algorithms."""
    from normbench.kernels import _softmax as S
    from normbench.kernels._common import warps_for

    out = []
    for log in ((False,) if quick else (False, True)):
        name = "log_softmax" if log else "softmax"
        for C in ((4096, S.MAX_FUSED_C) if quick else (1024, 4096, 8192, S.MAX_FUSED_C)):
            out.append((f"softmax fwd on-chip {name} C={C}", S._fused_fwd_kernel,
                        dict(X="x", Y="x", C=C, LOG=log, BLOCK_C=C), warps_for(C, 8, 1, 16)))
        for algo, code in S.ALGORITHMS.items():
            out.append((f"softmax fwd looped {algo} {name} [{S.BLOCK}]", S._looped_fwd_kernel,
                        dict(X="x", Y="x", C=256000, ALGO=code, LOG=log, BLOCK_C=S.BLOCK),
                        warps_for(S.BLOCK, 8, 1, 16)))
        for C in ((S.MAX_FUSED_C_BWD,) if quick else (1024, 4096, S.MAX_FUSED_C_BWD)):
            out.append((f"softmax bwd on-chip {name} C={C}", S._fused_bwd_kernel,
                        dict(Yp="x", DY="x", DX="x", C=C, LOG=log, BLOCK_C=C), warps_for(C, 8, 1, 16)))
        out.append((f"softmax bwd looped {name} [{S.BLOCK}]", S._looped_bwd_kernel,
                    dict(Yp="x", DY="x", DX="x", C=256000, LOG=log, BLOCK_C=S.BLOCK), warps_for(S.BLOCK, 8, 1, 16)))
    return out


def compile_case(kernel, values: dict, num_warps: int, dtype: str, arch: int):
    """Compile one kernel for ``sm_<arch>``; returns (registers, spill store bytes, spill load bytes)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    sig, consts, attrs = {}, {}, {}
    for i, p in enumerate(kernel.params):
        v = values[p.name]
        if p.is_constexpr:
            sig[p.name], consts[p.name] = "constexpr", v
        elif isinstance(v, str):
            sig[p.name] = "*" + (dtype if v == "x" else v)
            attrs[(i,)] = [["tt.divisibility", 16]]  # what the launcher sees for allocator-aligned tensors
        elif isinstance(v, float):
            sig[p.name] = "fp32"
        else:
            sig[p.name] = "i32"
            if v % 16 == 0:
                attrs[(i,)] = [["tt.divisibility", 16]]
    src = ASTSource(fn=kernel, signature=sig, constexprs=consts, attrs=attrs)
    compiled = triton.compile(src, target=GPUTarget("cuda", arch, 32), options={"num_warps": num_warps})
    ptxas = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "k.ptx")
        with open(path, "w") as f:
            f.write(compiled.asm["ptx"])
        suffix = "a" if arch >= 90 else ""
        res = subprocess.run([ptxas, f"-arch=sm_{arch}{suffix}", "-v", path, "-o", os.path.join(tmp, "k.cubin")],
                             capture_output=True, text=True)
    text = res.stdout + res.stderr
    regs = re.search(r"Used (\d+) registers", text)
    spill = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", text)
    return (int(regs.group(1)) if regs else -1,
            int(spill.group(1)) if spill else -1, int(spill.group(2)) if spill else -1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m normbench.kernels.aot", description=__doc__.splitlines()[0])
    ap.add_argument("--arch", type=int, default=90, help="CUDA compute capability x10 (90: H100/H200)")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"], help="input dtype")
    ap.add_argument("--quick", action="store_true", help="one or two cases per kernel")
    args = ap.parse_args(argv)
    from normbench.kernels._env import interpret_requested

    if interpret_requested():
        print("unset TRITON_INTERPRET: the interpreter builds no GPU code", file=sys.stderr)
        return 2
    try:
        import triton  # noqa: F401
    except ImportError:
        print("triton is not installed: pip install normbench[triton]", file=sys.stderr)
        return 2
    failed = 0
    for label, kernel, values, warps in _cases(args.quick):
        try:
            regs, st, ld = compile_case(kernel, values, warps, args.dtype, args.arch)
            flag = "  SPILLS" if st > 0 or ld > 0 else ""
            print(f"{label:58s} warps={warps:2d} regs={regs:3d} spill st/ld={st}/{ld}{flag}", flush=True)
        except Exception as exc:
            failed += 1
            print(f"{label:58s} warps={warps:2d} FAILED {type(exc).__name__}: {str(exc)[:300]}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
