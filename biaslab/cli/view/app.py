"""`biaslab view`: a local, read-only web app over a warehouse (Flask and Jinja2 templates).

Pages: `/` (models, datasets, collections, studies), `/study/<name>` (a study's headline tables, every row linking
to the stimuli behind it; `?dataset=` for the option study), `/stimuli` (search and filter by dataset, context,
model, option, probability range and text), `/stimulus/<stimulus_id>` (a stable URL: the stimulus, the prompt as
each model saw it cut at its tokenizer's boundaries where the tokenizer is on disk, the exact-mode answer trie with
each edge's probability and the parser's verdict, the samples with their parsed answers, the per-token
log-probabilities of scored sentences, continuations, and the same item across contexts, option orders and models
side by side).

Every request opens the warehouse read-only and closes it (a collection can write between requests); values from
a URL are bound parameters; an id that is not a stimulus id, or no stimulus, is a 404 page; nothing is written.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlencode

import pandas as pd
from flask import Flask, abort, render_template, request

from ...sql.quoting import identifier
from . import queries

#: the study tables a study page shows (public headline tables; the others are one `biaslab metrics` away)
STUDY_TABLES = {
    "contextuality": ["pf", "kl", "spearman", "cbd_fractions", "validity"],
    "misgendering": ["correctness", "agreement"],
    "negation": ["mixed_model", "condition_means"],
    "calibration": ["metrics"],
    "metaprompt": ["metaprompt"],
    "options": ["means", "calibration"],
}
#: row columns a study page turns into filters of the stimuli link
LINK_COLUMNS = {"dataset": "dataset", "context": "context", "model_key": "model"}


def create_app(db: str | Path) -> Flask:
    """The Flask app over the warehouse `db` (read-only; see the module docstring)."""
    app = Flask(__name__, template_folder=str(Path(__file__).parent / "templates"))
    app.config["DB"] = str(db)
    app.jinja_env.filters["num"] = queries.number
    app.jinja_env.globals["link"] = _stimuli_link

    @app.errorhandler(404)
    def not_found(error):
        return render_template("message.html", title="Not found", message=error.description), 404

    @app.route("/")
    def index():
        from ...metrics.registry import studies
        from ...warehouse.handle import open_warehouse

        with open_warehouse(app.config["DB"]) as handle:
            facts = queries.overview(handle)
        return render_template("index.html", db=app.config["DB"], studies=list(studies()), **facts)

    @app.route("/study/<name>")
    def study(name: str):
        return _study_page(app.config["DB"], name, request.args.get("dataset", ""))

    @app.route("/stimuli")
    def stimuli():
        filters = queries.Filters.parse(request.args)
        rows, total = (pd.DataFrame(), 0)
        if not filters.errors:
            with queries.warehouse(app.config["DB"]) as wh:
                rows, total = queries.search(wh, filters)
                choices = {c: [v for (v,) in wh.rows(f"SELECT DISTINCT {identifier(c)} FROM stimuli WHERE "
                                                      f"{identifier(c)} IS NOT NULL ORDER BY 1 LIMIT 200")]
                           for c in ("dataset", "context")}
        else:
            choices = {"dataset": [], "context": []}
        return render_template("search.html", filters=filters, rows=rows, total=total, limit=queries.SEARCH_LIMIT,
                               choices=choices)

    @app.route("/stimulus/<stimulus_id>")
    def stimulus(stimulus_id: str):
        if not queries.STIMULUS_ID.fullmatch(stimulus_id):
            abort(404, description="not a stimulus id (16 hexadecimal characters)")
        with queries.warehouse(app.config["DB"]) as wh:
            found = queries.stimulus(wh, stimulus_id)
        if found is None:
            abort(404, description=f"no stimulus {stimulus_id} in this warehouse")
        return render_template("stimulus.html", **found)

    return app


def _stimuli_link(row: dict, dataset: str = "") -> str:
    """/stimuli?... filtered by what a study row names (dataset, context, model)."""
    args = {}
    for column, name in LINK_COLUMNS.items():
        value = row.get(column)
        if isinstance(value, str) and value and value not in ("pooled", "sentence", "template"):
            args[name] = value
    if dataset and "dataset" not in args:
        args["dataset"] = dataset
    return "/stimuli?" + urlencode(args)


def _study_page(db: str, name: str, dataset: str):
    from ...errors import BiaslabError
    from ...metrics.registry import studies
    from ...warehouse.handle import open_warehouse

    known = studies()
    if name not in known:
        abort(404, description=f"no study {name!r}; studies: {', '.join(known)}")
    entry = known[name]
    datasets = list(entry.dataset_names)
    tables, message = {}, ""
    with open_warehouse(db) as handle:
        # the datasets with options, read with no value of the URL in the SQL; ?dataset= must be one of them, so
        # no URL value (a NUL byte, a huge or crafted string) ever reaches a query
        option_datasets = [d for (d,) in handle.warehouse.rows("SELECT DISTINCT dataset FROM option_probs "
                                                               "ORDER BY 1")] if name == "options" else []
        if name == "options" and dataset and dataset not in option_datasets:
            shown = repr(dataset[:60]) + (" (cut)" if len(dataset) > 60 else "")
            abort(404, description=f"no dataset with options named {shown}; datasets: "
                                   f"{', '.join(option_datasets) or 'none'}")
        try:
            if name == "options":
                if not dataset:
                    message = "the option study reads one dataset: choose it below"
                else:
                    tables = entry.function(handle, dataset)
            else:
                tables = entry.function(handle)
        except BiaslabError as exc:
            message = str(exc)
    shown = {t: tables[t] for t in STUDY_TABLES.get(name, list(tables)) if t in tables and not tables[t].empty}
    default = dataset or (datasets[0] if len(datasets) == 1 else "")
    return render_template("study.html", name=name, description=entry.description, tables=shown, message=message,
                           dataset=default, option_datasets=option_datasets)
