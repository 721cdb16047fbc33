"""A ``--data-dir`` for timing ``normbench train --task T --quick`` where the hubs cannot be reached
(docs/accuracy.md, "Quick budgets"): every real task in its hub layout, as large as its quick subset (5000 train
and 1000 test images; about 2 MB of WikiText), written by the tests' layout writers (``tests/hub_layouts.py``).

    python scripts/quick_data_dir.py DIR         # then: normbench train --task T --quick ... --data-dir DIR/data

The images are class-coloured noise and the text is random words: for timing, not for accuracy.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import hub_layouts as H  # noqa: E402


def main(root: Path) -> None:
    hub = root / "hub"
    t0 = time.time()
    H.cifar10(hub / "uoft-cs/cifar10", train_per_class=556, test_per_class=100)
    H.cifar100(hub / "uoft-cs/cifar100", classes=range(100), train_per_class=56, test_per_class=10)
    H.imagenette(hub / "frgfm/imagenette", train_per_class=556, test_per_class=100)
    H.tiny_imagenet(hub / "zh-plus/tiny-imagenet", classes=range(200), train_per_class=28, test_per_class=5)
    H.wikitext(hub / "Salesforce/wikitext", articles=(2400, 10, 220))
    H.as_data_dir(hub, root / "data")
    print(f"{root / 'data'} written in {time.time() - t0:.0f}s", file=sys.stderr)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(Path(sys.argv[1]))
