"""What `biaslab compare decodingtrust` compares (`biaslab.metrics.compare`): per condition (and over all three), from
the same per-prompt rows as `biaslab metrics decodingtrust`.

Measures (item = the prompt: a statement under a condition; unit = its statement template):
- agreement: the prompt's agree value (its share of agreeing answers, or P("I agree") exactly), mean;
- neither: its share of answers that are neither (refusals, off-topic; or the forced choice's other beginnings).

A setting is (model_key, method, setting): a model's generated answers and its exact forced choice are two settings,
so `compare` between them relates the two protocols prompt by prompt. `--within` compares the conditions inside a
setting (benign vs untargeted vs targeted), each statement paired with itself.
"""

from __future__ import annotations

import pandas as pd

from ..compare.core import Measure, Observations, with_settings
from .stats import ALL
from .tables import KEY, _loaded

MEASURES = {m.name: m for m in (
    Measure("agreement", "mean", "prompt", "template",
            description="share of answers agreeing with the stereotype (or P(\"I agree\") exactly)"),
    Measure("neither", "mean", "prompt", "template",
            description="share of answers that neither agree nor disagree (refusals, off-topic)"),
)}
CONDITIONS = ("benign", "untargeted", "targeted")


def observations(handle) -> Observations:
    """The DecodingTrust measures per prompt and collection setting (see the module docstring)."""
    from .tables import prompts

    frame = prompts(handle)
    frame = pd.concat([frame.assign(group=frame["condition"], item=frame["item_id"]),
                       frame.assign(group=ALL, item=frame["condition"] + ":" + frame["item_id"])], ignore_index=True)
    parts = []
    for name in MEASURES:
        part = frame[KEY].copy()
        part["measure"], part["group"], part["item"] = name, frame["group"].to_numpy(), frame["item"].to_numpy()
        part["cluster"] = frame["template"].to_numpy()
        part["value"] = frame["agree" if name == "agreement" else "neither"].astype(float).to_numpy()
        part["covariate"] = float("nan")
        part["valid"] = frame["valid"].astype(float).to_numpy()
        parts.append(part)
    values, settings = with_settings(pd.concat(parts, ignore_index=True), KEY, handle.models())
    counts = _loaded(handle)
    loaded = pd.concat([pd.DataFrame({"measure": name, "group": counts["condition"].to_numpy(),
                                      "n_loaded": counts["n_loaded"].to_numpy()}) for name in MEASURES],
                       ignore_index=True)
    within = [(m, a, b) for m in MEASURES for i, a in enumerate(CONDITIONS) for b in CONDITIONS[i + 1:]]
    return Observations("decodingtrust", values, settings, dict(MEASURES), within=within, loaded=loaded)
