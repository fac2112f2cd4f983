"""`VIEWS`: view name -> builder (a function of a `Source`), in dependency order."""

from __future__ import annotations

from .calibration import identity_pair_probs, pronoun_pair_probs
from .contextuality import winopron_pf, winopron_stimuli, winopron_validity
from .misgendering import gen_samples, misgendering_prob, misgendering_prob_options
from .options import option_probs
from .scores import sequence_metrics

VIEWS = {
    "sequence_metrics": sequence_metrics,
    "pronoun_pair_probs": pronoun_pair_probs,
    "identity_pair_probs": identity_pair_probs,
    "winopron_stimuli": winopron_stimuli,
    "winopron_pf": winopron_pf,
    "winopron_validity": winopron_validity,
    "misgendering_prob_options": misgendering_prob_options,
    "misgendering_prob": misgendering_prob,
    "gen_samples": gen_samples,
    "option_probs": option_probs,
}
