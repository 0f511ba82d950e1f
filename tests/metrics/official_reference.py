"""Load the independent reference for the SQuAD metrics: transformers 4.x's port of the
official ``evaluate-v2.0.py`` (``transformers/data/metrics/squad_metrics.py``).

transformers 5 dropped that module, so ``.ci/run`` downloads the transformers 4.44.2 wheel
(``pip download --no-deps``) and points ``STRUCTQA_SQUAD_REF_WHEEL`` at it. The module is read
out of the wheel at test time (never committed here); its three package-relative imports are
replaced by stand-ins, since the metric functions use none of them.
"""

from __future__ import annotations

import logging
import os
import sys
import types
import zipfile

ENV = "STRUCTQA_SQUAD_REF_WHEEL"
MEMBER = "transformers/data/metrics/squad_metrics.py"


def load_reference() -> types.ModuleType | None:
    try:
        import transformers.data.metrics.squad_metrics as mod  # transformers < 5

        return mod
    except ImportError:
        pass
    wheel = os.environ.get(ENV)
    if not wheel or not os.path.exists(wheel):
        return None
    with zipfile.ZipFile(wheel) as zf:
        src = zf.read(MEMBER).decode("utf-8")
    stand_ins = {
        "from ...models.bert import BasicTokenizer": "BasicTokenizer = None",
        "from ...utils import logging": "import logging",
        "logger = logging.get_logger(__name__)": "logger = logging.getLogger(__name__)",
    }
    for old, new in stand_ins.items():
        src = src.replace(old, new)
    src = src.replace(
        "from ...tokenization_utils_base import", "# from ...tokenization_utils_base import"
    )
    mod = types.ModuleType("squad_metrics_reference")
    mod.__dict__["logging"] = logging
    exec(compile(src, f"{wheel}!{MEMBER}", "exec"), mod.__dict__)
    sys.modules["squad_metrics_reference"] = mod
    return mod
