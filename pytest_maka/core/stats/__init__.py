"""Pure statistics over cell records (no pytest, no I/O, no third-party numerics).

- :mod:`.tdist`: Student's t CDF and quantile for whole degrees of freedom (no SciPy)
- :mod:`.rates`: Wilson and cluster-robust (score, t(G-1)) intervals for a pass rate
- :mod:`.passk`: unbiased pass@k / pass^k with bounded intervals, per-task rates
- :mod:`.signflip`: the exact (or seeded Monte Carlo) sign-flip permutation test
- :mod:`.paired`: paired comparisons (McNemar exact + Tango; sign-flip + t), Holm over non-reference pairs
- :mod:`.power`: tasks needed and minimum detectable effect of a comparison
- :mod:`.describe`: distributions, cost and tokens per cell and per success
- :mod:`.summary`: per-subject and per-cohort summaries, task health
"""

from .describe import Distribution, Spend, quantile, spend_of
from .paired import (
    HOLM,
    MCNEMAR,
    REFERENCE,
    SIGN_FLIP,
    PairedComparison,
    adjust_family,
    binom_cdf_half,
    compare_paired,
    holm,
    mcnemar_exact,
    t_interval,
    tango_interval,
    tango_score,
)
from .passk import KEstimate, TaskRate, pass_at_k, pass_hat_k, pass_k_table
from .power import MIN_TASKS, WEAK_TASKS, PowerNote, detectable, power_note, smallest_p, tasks_needed
from .rates import CLUSTER, WILSON, Rate, bounded_mean_interval, clustered_se, mean_se, score_interval, wilson_interval
from .signflip import SignFlip, sign_flip_test
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
from .tdist import Z80, Z95, t95, t_cdf, t_quantile

__all__ = [
    "CLUSTER",
    "HOLM",
    "MCNEMAR",
    "MIN_TASKS",
    "NOP_KIND",
    "ORACLE_KIND",
    "REFERENCE",
    "REFERENCE_KINDS",
    "SIGN_FLIP",
    "WEAK_TASKS",
    "WILSON",
    "Z80",
    "Z95",
    "CohortSummary",
    "Distribution",
    "HealthFlag",
    "KEstimate",
    "PairedComparison",
    "PowerNote",
    "Rate",
    "SignFlip",
    "Spend",
    "SubjectSummary",
    "TaskHealth",
    "TaskRate",
    "adjust_family",
    "binom_cdf_half",
    "bounded_mean_interval",
    "clustered_se",
    "compare_paired",
    "detectable",
    "flip",
    "graded_by_task",
    "holm",
    "mcnemar_exact",
    "mean_se",
    "pairwise",
    "pass_at_k",
    "pass_hat_k",
    "pass_k_table",
    "power_note",
    "quantile",
    "score_interval",
    "sign_flip_test",
    "smallest_p",
    "spend_of",
    "status_of",
    "summarize",
    "summarize_subject",
    "t95",
    "t_cdf",
    "t_interval",
    "t_quantile",
    "tango_interval",
    "tango_score",
    "task_health",
    "tasks_needed",
    "wilson_interval",
]
