"""The downloads page and each device's download files (gzip-compressed CSV and Parquet).
"""

from __future__ import annotations

from normbench.site import downloads
from normbench.site.pages.base import Page, download_stem
from normbench.site.pages.core import SiteCore


class DownloadPages(SiteCore):
    """The downloads of a ``Site``."""

    def download_part(self, hw: str):
        """A device's records as gzip-compressed CSV and Parquet (``downloads.part_files``); no page."""

        csv, parquet = downloads.part_files(self.hw_records(hw))
        stem = download_stem(hw)
        self.extra_files[f"{stem}.csv.gz"] = csv
        self.extra_files[f"{stem}.parquet"] = parquet
        return iter(())

    def downloads_page(self) -> Page:
        parts = [(hw, self.hw_name(hw), download_stem(hw), len(self.hw_records(hw))) for hw in sorted(self.hw_entries)]
        return Page("downloads.html", "downloads.html", "Downloads", ctx=dict(
            n=len(self.loaded.entries), n_kernel=len(self.kernels), n_acc=len(self.acc_rows), parts=parts))
