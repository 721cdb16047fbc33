"""ASV's install step (asv.conf.json): install the benchmarked commit's wheel into ASV's environment.

Default: ``pip install -c <commit>/constraints.txt <wheel>``, so torch and the rest come pinned, as the commit's own
set-up would install them (once per environment; later commits only replace normbench).

``NORMBENCH_ASV_SITE_PACKAGES=<dir>[:<dir>...]`` instead installs the wheel alone and makes the packages already
installed in those site-packages directories (e.g. the repo's ``.venv``) importable in the environment: every entry of
them except normbench's own is linked into ``<env>/normbench-host-packages``, which a ``.pth`` file appends to
``sys.path`` (after the environment's own site-packages, so the benchmarked normbench always wins). For offline
machines and for the CI test, where installing torch into a fresh environment would take minutes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig


def _is_normbench(name: str) -> bool:
    low = name.lower()
    return low in ("normbench", "normbench.pth") or low.startswith(("normbench-", "__editable__.normbench-",
                                                                      "__editable___normbench"))


def main(wheel: str, build_dir: str) -> None:
    host = [p for p in os.environ.get("NORMBENCH_ASV_SITE_PACKAGES", "").split(os.pathsep) if p]
    pip = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check"]
    if not host:
        constraints = os.path.join(build_dir, "constraints.txt")
        subprocess.check_call(pip + (["-c", constraints] if os.path.exists(constraints) else []) + [wheel])
        return
    missing = [p for p in host if not os.path.isdir(p)]
    if missing:
        sys.exit(f"NORMBENCH_ASV_SITE_PACKAGES names no directory: {', '.join(missing)}")
    subprocess.check_call(pip + ["--no-deps", "--force-reinstall", wheel])
    site = sysconfig.get_paths()["purelib"]
    linked = os.path.join(sys.prefix, "normbench-host-packages")
    shutil.rmtree(linked, ignore_errors=True)
    os.makedirs(linked)
    for directory in host:
        for name in os.listdir(directory):
            target = os.path.join(linked, name)
            if _is_normbench(name) or name.endswith(".pth") or os.path.lexists(target):
                continue
            os.symlink(os.path.join(os.path.abspath(directory), name), target)
    with open(os.path.join(site, "normbench-host-packages.pth"), "w", encoding="utf-8") as f:
        f.write(linked + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:3])
