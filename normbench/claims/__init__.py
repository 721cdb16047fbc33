"""Paper claims checked against the committed records (``normbench claims``): the public API of the three parts.

- :mod:`normbench.claims.rules`: the pre-registered claims and their fixed decision rules (data only);
- :mod:`normbench.claims.evaluation`: the rules applied to the records (:func:`evaluate`, :func:`load_records`);
- :mod:`normbench.claims.command`: the ``normbench claims`` command and the text and Markdown output.
"""

from normbench.claims.command import comparison_line, escape_md, format_p, to_markdown, to_text
from normbench.claims.evaluation import (
    evaluate,
    evaluate_accuracy,
    evaluate_speed,
    load_records,
    machine_speed_rows,
    reads,
)
from normbench.claims.rules import (
    ACC_MARGIN,
    ALPHA,
    CLAIMS,
    DEEP,
    DEEP_STRESS,
    DIVERGENCE_SEEDS,
    IMAGE_TASK,
    LM_TASK,
    MIN_FINISHED,
    MIN_PAIRS,
    MIN_SEEDS,
    PPL_MARGIN,
    SOFTMAX_PAIRS,
    STEPS_MARGIN,
    VERDICTS,
    Accuracy,
    Arm,
    Cell,
    Claim,
    Speed,
    get_claim,
)

__all__ = [
    "ACC_MARGIN", "ALPHA", "CLAIMS", "DEEP", "DEEP_STRESS", "DIVERGENCE_SEEDS", "IMAGE_TASK", "LM_TASK",
    "MIN_FINISHED", "MIN_PAIRS", "MIN_SEEDS", "PPL_MARGIN", "SOFTMAX_PAIRS", "STEPS_MARGIN", "VERDICTS",
    "Accuracy", "Arm", "Cell", "Claim", "Speed", "get_claim",
    "evaluate", "evaluate_accuracy", "evaluate_speed", "load_records", "machine_speed_rows", "reads",
    "comparison_line", "escape_md", "format_p", "to_markdown", "to_text",
]
