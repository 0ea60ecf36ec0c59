"""Pure statistics over cell records (no pytest, no I/O, no third-party numerics).

- :mod:`.tdist`: Student's t CDF and quantile for whole degrees of freedom (no SciPy)
- :mod:`.rates`: Wilson and cluster-robust (score, t(G-1)) intervals for a pass rate
- :mod:`.passk`: unbiased pass@k / pass^k with bounded intervals, per-task rates
- :mod:`.signflip`: the exact (or seeded Monte Carlo) sign-flip permutation test
- :mod:`.paired`: paired comparisons (McNemar exact + Tango; sign-flip + t), Holm over non-reference pairs
- :mod:`.power`: tasks needed and minimum detectable effect of a comparison
- :mod:`.scores`: partial credit: mean scores of official rows
- :mod:`.variance`: between- vs within-task variance, what more repetitions or tasks buy
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
    compare_scores,
    degenerate_interval,
    holm,
    inverted_bound,
    mcnemar_exact,
    mcnemar_log_p,
    t_interval,
    tango_interval,
    tango_score,
)
from .passk import KEstimate, TaskRate, pass_at_k, pass_hat_k, pass_k_table
from .power import MIN_TASKS, WEAK_TASKS, PowerNote, detectable, power_note, smallest_p, tasks_needed
from .rates import (
    CLUSTER,
    NEAR_BOUND,
    WILSON,
    Rate,
    bounded_mean_interval,
    clustered_se,
    corrected_score_interval,
    exact_lower,
    mean_se,
    rate_interval,
    score_interval,
    wilson_interval,
)
from .scores import ScoreMean, partial_credit, score_mean, scores_by_task
from .signflip import SignFlip, sign_flip_test
from .summary import (
    NOP_KIND,
    ORACLE_KIND,
    RANKING,
    REFERENCE_KINDS,
    CohortSummary,
    HealthFlag,
    SubjectSummary,
    TaskHealth,
    flip,
    graded_by_task,
    pairwise,
    status_of,
    strict_by_task,
    summarize,
    summarize_subject,
    task_health,
)
from .tdist import Z80, Z95, t95, t_cdf, t_quantile
from .variance import VarianceSplit, variance_split

__all__ = [
    "CLUSTER",
    "HOLM",
    "MCNEMAR",
    "MIN_TASKS",
    "NEAR_BOUND",
    "NOP_KIND",
    "ORACLE_KIND",
    "RANKING",
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
    "ScoreMean",
    "SignFlip",
    "Spend",
    "SubjectSummary",
    "TaskHealth",
    "TaskRate",
    "VarianceSplit",
    "adjust_family",
    "binom_cdf_half",
    "bounded_mean_interval",
    "clustered_se",
    "compare_paired",
    "compare_scores",
    "corrected_score_interval",
    "degenerate_interval",
    "detectable",
    "exact_lower",
    "flip",
    "graded_by_task",
    "holm",
    "inverted_bound",
    "mcnemar_exact",
    "mcnemar_log_p",
    "mean_se",
    "pairwise",
    "partial_credit",
    "pass_at_k",
    "pass_hat_k",
    "pass_k_table",
    "power_note",
    "quantile",
    "rate_interval",
    "score_interval",
    "score_mean",
    "scores_by_task",
    "sign_flip_test",
    "smallest_p",
    "spend_of",
    "status_of",
    "strict_by_task",
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
    "variance_split",
    "wilson_interval",
]
