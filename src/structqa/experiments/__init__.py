"""Grids of training runs (``structqa experiment``) and their aggregation into tables."""

from structqa.experiments.aggregate import refresh, summary
from structqa.experiments.grid import experiment_from_dict, load_experiment
from structqa.experiments.results import load_results, metric_value, sample_std
from structqa.experiments.spec import Experiment, Run, plan

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
