"""Load the independent reference for the DROP metric: the official DROP evaluation as shipped
in ``allennlp-models`` (``allennlp_models/rc/tools/drop.py``).

``.ci/run`` downloads the allennlp-models 2.10.1 wheel (``pip download --no-deps``; installing
it would pull in allennlp and its heavy dependencies) and points ``STRUCTQA_DROP_REF_WHEEL`` at
it. The module is read out of the wheel at test time (never committed here). It imports only
the standard library, numpy and scipy, so it runs as is; the guard below replaces any
allennlp import a later release might add with a stand-in, since the metric functions need none.
"""

from __future__ import annotations

import os
import re
import sys
import types
import zipfile

ENV = "STRUCTQA_DROP_REF_WHEEL"
MEMBER = "allennlp_models/rc/tools/drop.py"
MODULE_NAME = "drop_eval_reference"

_ALLENNLP_IMPORT = re.compile(r"^(from allennlp\S* import .*|import allennlp\S*.*)$", re.M)


def load_reference() -> types.ModuleType | None:
    """The reference module, or None when ``STRUCTQA_DROP_REF_WHEEL`` names no wheel."""
    if MODULE_NAME in sys.modules:
        return sys.modules[MODULE_NAME]
    wheel = os.environ.get(ENV)
    if not wheel or not os.path.exists(wheel):
        return None
    with zipfile.ZipFile(wheel) as zf:
        src = zf.read(MEMBER).decode("utf-8")
    src = _ALLENNLP_IMPORT.sub(lambda m: "pass  # stand-in for: " + m.group(0), src)
    mod = types.ModuleType(MODULE_NAME)
    exec(compile(src, f"{wheel}!{MEMBER}", "exec"), mod.__dict__)
    sys.modules[MODULE_NAME] = mod
    return mod
