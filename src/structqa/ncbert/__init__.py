"""GenBERT / NC-BERT on DROP: configuration and training loop (``structqa drop-train``,
``structqa drop-predict``)."""

from structqa.ncbert.config import DropConfig, load_drop_config
from structqa.ncbert.loop import load_genbert, predict_file, run

__all__ = ["DropConfig", "load_drop_config", "load_genbert", "predict_file", "run"]
