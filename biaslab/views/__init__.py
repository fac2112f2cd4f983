"""The ONE definition of every relational view (docs/design.md section 2).

Each view is an Ibis expression over the warehouse's base tables (`Source`: table name -> Ibis table). From these
expressions come:

* the DuckDB views of every warehouse connection (`statements`: the expressions compiled to DuckDB SQL, then the
  SQL macros of `biaslab/sql/macros/`), which `biaslab sql`, metrics and reports read;
* the views of an export's views.sql (the same statements, not TEMP);
* the Ibis tables of `biaslab.open(...)` on any Ibis engine (the expressions themselves, e.g. over an export's
  Parquet files with DataFusion);
* the inputs of the study metrics, which execute the expressions on the handle's engine.

`VIEWS` maps view name -> builder, in dependency order (a builder may call the builders before it).
"""

from __future__ import annotations

from .calibration import identity_pair_probs, pronoun_pair_probs
from .common import DEFAULT_BACKEND, Source, json_field, model_labels
from .compile import compiled, objects, statements, unbound_source
from .contextuality import sample_codes, sample_settings, winopron_pf, winopron_stimuli, winopron_validity
from .metaprompt import meta_answers, meta_stimuli
from .misgendering import gen_samples, misgendering_prob, misgendering_prob_options
from .options import option_probs
from .registry import VIEWS
from .scores import negation_sentences, sequence_metrics

__all__ = ["DEFAULT_BACKEND", "VIEWS", "Source", "compiled", "gen_samples", "identity_pair_probs", "json_field",
           "meta_answers", "meta_stimuli", "misgendering_prob", "misgendering_prob_options", "model_labels",
           "negation_sentences", "objects", "option_probs",
           "pronoun_pair_probs", "sample_codes", "sample_settings", "sequence_metrics", "statements",
           "unbound_source", "winopron_pf", "winopron_stimuli", "winopron_validity"]
