"""``import timm`` (and ``import torchvision``) in a virtual environment that pairs a CPU build of torch with
PyPI's torchvision, a CUDA build whose compiled ops cannot load there ("operator torchvision::nms does not exist").

``scripts/setup.sh`` writes a ``.pth`` file that runs this file at interpreter start-up. It imports nothing heavy:
it puts a finder on ``sys.meta_path`` that, when ``torchvision`` is first imported, and only when torch is a CPU
build and torchvision is not, defines the schemas of torchvision's compiled ops (``normbench._compat``) so its
pure-Python part imports; calling one of those detection ops then fails with torch's "no kernel" error. Anywhere
else (a GPU machine, a matching CPU torchvision) it steps aside and changes nothing. Run directly by path: it must
not import ``normbench`` (whose package imports torch)."""

from __future__ import annotations

import sys


def _needs_schemas() -> bool:
    from importlib import metadata

    try:
        torch_v, vision_v = metadata.version("torch"), metadata.version("torchvision")
    except metadata.PackageNotFoundError:
        return False
    return "+cpu" in torch_v and "+cpu" not in vision_v


class TorchvisionOnCpuTorch:
    """A meta-path finder that acts once, at the first ``import torchvision``, then removes itself."""

    def find_spec(self, name, path=None, target=None):
        if name != "torchvision":
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        if _needs_schemas():
            from normbench._compat import _define_torchvision_schemas

            _define_torchvision_schemas()
        return None   # the ordinary finders import it


def install() -> None:
    if not any(type(f).__name__ == TorchvisionOnCpuTorch.__name__ for f in sys.meta_path):
        sys.meta_path.insert(0, TorchvisionOnCpuTorch())


if __name__ in ("__main__", "<run_path>"):
    install()
