"""Compatibility shims: import timm where torchvision's compiled ops cannot load (CPU-only torch)."""

from __future__ import annotations

import importlib
import sys

import torch

# The op schemas torchvision's pure-Python part registers fake kernels for. On a CPU build of torch
# with a CUDA build of torchvision, torchvision/_C.so cannot load, so these ops do not exist and
# `import torchvision` fails. Defining the schemas (with no kernels) lets the pure-Python part
# import; calling one of these detection ops then fails with torch's "no kernel" error.
# normbench never calls them: timm needs torchvision only for transforms and FrozenBatchNorm2d.
_TORCHVISION_SCHEMAS = (
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "roi_align(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, SymInt pooled_width, "
    "int sampling_ratio, bool aligned) -> Tensor",
    "_roi_align_backward(Tensor grad, Tensor rois, float spatial_scale, SymInt pooled_height, SymInt pooled_width, "
    "SymInt batch_size, SymInt channels, SymInt height, SymInt width, int sampling_ratio, bool aligned) -> Tensor",
    "qroi_align(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, SymInt pooled_width, "
    "int sampling_ratio, bool aligned) -> Tensor",
    "ps_roi_align(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, SymInt pooled_width, "
    "int sampling_ratio) -> (Tensor, Tensor)",
    "_ps_roi_align_backward(Tensor grad, Tensor rois, Tensor channel_mapping, float spatial_scale, "
    "SymInt pooled_height, SymInt pooled_width, int sampling_ratio, SymInt batch_size, SymInt channels, "
    "SymInt height, SymInt width) -> Tensor",
    "roi_pool(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, SymInt pooled_width) "
    "-> (Tensor, Tensor)",
    "_roi_pool_backward(Tensor grad, Tensor rois, Tensor argmax, float spatial_scale, SymInt pooled_height, "
    "SymInt pooled_width, SymInt batch_size, SymInt channels, SymInt height, SymInt width) -> Tensor",
    "ps_roi_pool(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, SymInt pooled_width) "
    "-> (Tensor, Tensor)",
    "_ps_roi_pool_backward(Tensor grad, Tensor rois, Tensor channel_mapping, float spatial_scale, "
    "SymInt pooled_height, SymInt pooled_width, SymInt batch_size, SymInt channels, SymInt height, "
    "SymInt width) -> Tensor",
    "deform_conv2d(Tensor input, Tensor weight, Tensor offset, Tensor mask, Tensor bias, SymInt stride_h, "
    "SymInt stride_w, SymInt pad_h, SymInt pad_w, SymInt dilation_h, SymInt dilation_w, SymInt groups, "
    "SymInt offset_groups, bool use_mask) -> Tensor",
    "_deform_conv2d_backward(Tensor grad, Tensor input, Tensor weight, Tensor offset, Tensor mask, Tensor bias, "
    "SymInt stride_h, SymInt stride_w, SymInt pad_h, SymInt pad_w, SymInt dilation_h, SymInt dilation_w, "
    "SymInt groups, SymInt offset_groups, bool use_mask) -> (Tensor, Tensor, Tensor, Tensor, Tensor)",
)
_LIBRARY = None


def _define_torchvision_schemas() -> None:
    global _LIBRARY
    _LIBRARY = torch.library.Library("torchvision", "FRAGMENT")
    for schema in _TORCHVISION_SCHEMAS:
        try:
            _LIBRARY.define(schema)
        except RuntimeError:  # already defined (torchvision partly loaded)
            pass


def import_timm():
    """Import and return ``timm``, working around a torchvision whose compiled ops cannot load."""
    try:
        import timm
        return timm
    except ImportError as exc:
        raise ImportError(
            "timm is not installed: pip install -e '.[models]' (it needs torchvision matching your torch)"
        ) from exc
    except RuntimeError as exc:
        if "torchvision::" not in str(exc):
            raise
    return _import_past_torchvision_ops("timm")


def _import_past_torchvision_ops(top: str):
    """Import ``top`` again after a first import failed on torchvision's C++ ops: drop the half-imported modules,
    define the ops' schemas, import once more (the retry :func:`import_timm` and :func:`import_transformers` share)."""
    for key in [k for k in sys.modules if k.split(".")[0] in ("torchvision", top)]:
        del sys.modules[key]
    _define_torchvision_schemas()
    return importlib.import_module(top)


def import_transformers():
    """Import and return ``transformers``, with the same torchvision workaround as :func:`import_timm` (its model
    modules import torchvision's transforms when torchvision is installed)."""
    try:
        import transformers
        transformers.PreTrainedModel  # the lazy module imports torchvision on first use of a model class
        return transformers
    except ImportError as exc:
        if "torchvision" not in repr(exc.__cause__ or exc) and not isinstance(exc, ModuleNotFoundError):
            raise
        if isinstance(exc, ModuleNotFoundError) and exc.name == "transformers":
            raise ImportError("transformers is not installed: pip install -e '.[hf]'") from exc
    except RuntimeError as exc:
        if "torchvision::" not in str(exc):
            raise
    return _import_past_torchvision_ops("transformers")
