"""The static leaderboard: ``build_site(results, out)`` turns the records in results/ into a self-contained site."""

from __future__ import annotations

__all__ = ["BuildReport", "build_site"]


def __getattr__(name: str):
    # Lazy: the site's libraries (the ``site`` extra) are needed to build a site, not to run ``normbench bench`` on a
    # machine that only has torch (a GPU image, a bare install), whose CLI registers the ``site`` command too.
    if name in __all__:
        from normbench.site import build

        return getattr(build, name)
    raise AttributeError(f"module 'normbench.site' has no attribute {name!r}")
