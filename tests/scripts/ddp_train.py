"""Run by ``torchrun`` from tests/test_distributed.py: train the runs given as JSON; rank 0 writes their records."""

import json
import os
import sys

import torch

from normbench.train.loop import Run, train

runs, out = json.loads(sys.argv[1]), sys.argv[2]
torch.set_num_threads(1)
records = [train(Run(**kw)) for kw in runs]
if int(os.environ["RANK"]) == 0:
    with open(out, "w") as f:
        json.dump(records, f)
