"""The static leaderboard: ``build_site(results, out)`` turns the records in results/ into a self-contained site."""

from __future__ import annotations

from normbench.site.build import BuildReport, build_site

__all__ = ["BuildReport", "build_site"]
