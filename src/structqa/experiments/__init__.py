"""Grids of training runs (``structqa experiment``) and their aggregation into tables."""

from structqa.experiments.aggregate import load_results, metric_value, refresh, sample_std, summary
from structqa.experiments.grid import Experiment, Run, experiment_from_dict, load_experiment, plan

__all__ = [
    "Experiment",
    "Run",
    "experiment_from_dict",
    "load_experiment",
    "load_results",
    "metric_value",
    "plan",
    "refresh",
    "sample_std",
    "summary",
]
