"""Pure statistics over cell records (no pytest, no I/O, no third-party numerics).

- :mod:`.rates`: Wilson and cluster-robust intervals for a pass rate
- :mod:`.passk`: unbiased pass@k / pass^k, per-task rates
- :mod:`.paired`: paired comparisons (McNemar exact, paired bootstrap), Holm adjustment
- :mod:`.describe`: distributions, cost and tokens per cell and per success
- :mod:`.summary`: per-subject and per-cohort summaries, task health
"""

from .describe import Distribution, Spend, quantile, spend_of
from .paired import (
    BOOTSTRAP,
    MCNEMAR,
    PairedComparison,
    binom_cdf_half,
    compare_paired,
    holm,
    mcnemar_exact,
    paired_bootstrap,
)
from .passk import KEstimate, TaskRate, pass_at_k, pass_hat_k, pass_k_table
from .rates import CLUSTER, WILSON, Z95, Rate, clustered_se, mean_se, wilson_interval
from .summary import (
    NOP_KIND,
    ORACLE_KIND,
    REFERENCE_KINDS,
    CohortSummary,
    HealthFlag,
    SubjectSummary,
    TaskHealth,
    flip,
    graded_by_task,
    pairwise,
    status_of,
    summarize,
    summarize_subject,
    task_health,
)

__all__ = [
    "BOOTSTRAP",
    "CLUSTER",
    "MCNEMAR",
    "NOP_KIND",
    "ORACLE_KIND",
    "REFERENCE_KINDS",
    "WILSON",
    "Z95",
    "CohortSummary",
    "Distribution",
    "HealthFlag",
    "KEstimate",
    "PairedComparison",
    "Rate",
    "Spend",
    "SubjectSummary",
    "TaskHealth",
    "TaskRate",
    "binom_cdf_half",
    "clustered_se",
    "compare_paired",
    "flip",
    "graded_by_task",
    "holm",
    "mcnemar_exact",
    "mean_se",
    "paired_bootstrap",
    "pairwise",
    "pass_at_k",
    "pass_hat_k",
    "pass_k_table",
    "quantile",
    "spend_of",
    "status_of",
    "summarize",
    "summarize_subject",
    "task_health",
    "wilson_interval",
]
