"""`biaslab view`: a local, read-only web app over a warehouse (Flask and Jinja2 templates).

Pages: `/` (models, datasets, collections, studies), `/study/<name>` (a study's headline tables, every row linking
to the stimuli behind it; `?dataset=` for the option study), `/stimuli` (search and filter by dataset, context,
model, option, probability range and text), `/stimulus/<stimulus_id>` (a stable URL: the stimulus, the prompt as
each model saw it cut at its tokenizer's boundaries where the tokenizer is on disk, the exact-mode answer trie with
each edge's probability and the parser's verdict, the samples with their parsed answers, the per-token
log-probabilities of scored sentences, continuations, and the same item across contexts, option orders and models
side by side).

`/compare/<study>?a=&b=` shows the paired differences between two of the study's settings (what `biaslab compare`
prints: intervals, adjusted p, coverage and valid shares, the marks), each row linked to the stimuli behind it.

Every request opens the warehouse read-only and closes it (a collection can write between requests); values from
a URL are bound parameters or must be one of the values the page offers; an id that is not a stimulus id, or no
stimulus, is a 404 page; nothing is written. A study page's tables and a comparison are computed once per warehouse
state (`WarehouseCache`: the file's and its WAL's size and modification time), so a page answers from memory until
evidence is added.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlencode

import pandas as pd
from flask import Flask, Response, abort, render_template, request

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
#: per study, the row columns that are stimulus attributes (`attrs`), linked as `attr.NAME=VALUE` filters
ATTR_COLUMNS = {"holistic-bias": ("axis", "descriptor", "template"), "bbq": ("category", "context_condition"),
                "crows-pairs": ("bias_type",), "decodingtrust": ("topic", "group"),
                "counterfactual": ("attribute",)}
#: row values that stand for a pooled group, not one value (no filter)
POOLED = ("pooled", "sentence", "template", "(all)", "all", "ALL")


class WarehouseCache:
    """Results computed from a warehouse, kept while the warehouse is unchanged: each entry is keyed by what it is
    and by the warehouse's state (size and modification time of the file and of its write-ahead log), so a
    collection that adds evidence makes every entry computed before it stale. At most `size` entries (the oldest
    go first)."""

    def __init__(self, size: int = 32) -> None:
        import threading

        self.size, self.entries = size, {}
        self.lock = threading.Lock()  # the app serves requests in threads: one computation at a time

    @staticmethod
    def state(db: str) -> tuple:
        out = []
        for path in (Path(db), Path(str(db) + ".wal")):
            try:
                stat = path.stat()
                out.append((stat.st_size, stat.st_mtime_ns))
            except OSError:
                out.append(None)
        return tuple(out)

    def get(self, db: str, key: tuple, compute):
        with self.lock:
            return self._get(db, key, compute)

    def _get(self, db: str, key: tuple, compute):
        full = (key, self.state(db))
        if full not in self.entries:
            value = compute()
            full = (key, self.state(db))  # the state after computing: a write meanwhile leaves it uncached
            self.entries[full] = value
            while len(self.entries) > self.size:
                self.entries.pop(next(iter(self.entries)))
        return self.entries[full]


def create_app(db: str | Path) -> Flask:
    """The Flask app over the warehouse `db` (read-only; see the module docstring)."""
    app = Flask(__name__, template_folder=str(Path(__file__).parent / "templates"))
    app.config["DB"] = str(db)
    app.config["CACHE"] = WarehouseCache()
    app.jinja_env.filters["num"] = queries.number
    app.jinja_env.globals["link"] = _stimuli_link
    _error_pages(app)
    _warm(app.config["DB"])

    @app.route("/")
    def index():
        from ...metrics.registry import studies
        from ...warehouse.handle import open_warehouse

        with open_warehouse(app.config["DB"]) as handle:
            facts = queries.overview(handle)
        return render_template("index.html", db=app.config["DB"], studies=list(studies()), **facts)

    @app.route("/study/<name>")
    def study(name: str):
        return _study_page(app.config["DB"], name, request.args.get("dataset", ""), app.config["CACHE"])

    @app.route("/figure/<name>/<int:index>")
    def figure(name: str, index: int):
        return _figure(app.config["DB"], name, index, request.args.get("dataset", ""), app.config["CACHE"])

    @app.route("/compare/<name>")
    def compare(name: str):
        return _compare_page(app.config["DB"], name, request.args, app.config["CACHE"])

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
            found = queries.stimulus(wh, stimulus_id, wait=False)
        if found is None:
            abort(404, description=f"no stimulus {stimulus_id} in this warehouse")
        return render_template("stimulus.html", loading=queries.tokenizers_pending(), **found)

    return app


def _warm(db: str) -> None:
    """The warehouse's tokenizers start loading in the background (`queries.warm_tokenizers`): the first stimulus
    page answers at once, with token boundaries from the next load on."""
    try:
        with queries.warehouse(db) as wh:
            queries.warm_tokenizers(wh)
    except Exception:  # noqa: BLE001 - no warehouse yet, or an old one: the pages say so themselves
        pass


def _error_pages(app: Flask) -> None:
    """A page not found (404) and a page whose queries ran too long (503, `queries.QueryTooLong`): one line each."""
    @app.errorhandler(404)
    def not_found(error):
        return render_template("message.html", title="Not found", message=error.description), 404

    @app.errorhandler(queries.QueryTooLong)
    def too_long(error):
        return render_template("message.html", title="Stopped", message=str(error)), 503


def _stimuli_link(row: dict, dataset: str = "", study: str = "") -> str:
    """/stimuli?... filtered by what a study row names (dataset, context, model, and the study's attribute columns:
    a HolisticBias row's axis and descriptor, a BBQ row's category)."""
    args = {}
    names = {**LINK_COLUMNS, **{c: f"attr.{c}" for c in ATTR_COLUMNS.get(study, ())}}
    for column, name in names.items():
        value = row.get(column)
        if isinstance(value, str) and value and value not in POOLED:
            args[name] = value
    if dataset and "dataset" not in args:
        args["dataset"] = dataset
    return "/stimuli?" + urlencode(args)


def _study_page(db: str, name: str, dataset: str, cache: WarehouseCache | None = None):
    from ...errors import BiaslabError
    from ...metrics.registry import studies
    from ...warehouse.handle import open_warehouse

    known = studies()
    if name not in known:
        abort(404, description=f"no study {name!r}; studies: {', '.join(known)}")
    entry = known[name]
    datasets = list(entry.dataset_names)
    option_datasets = _option_datasets(db) if name == "options" else []
    # ?dataset= must be one of the datasets with options, read with no value of the URL in the SQL: no URL value
    # (a NUL byte, a huge or crafted string) ever reaches a query
    if name == "options" and dataset and dataset not in option_datasets:
        shown = repr(dataset[:60]) + (" (cut)" if len(dataset) > 60 else "")
        abort(404, description=f"no dataset with options named {shown}; datasets: "
                               f"{', '.join(option_datasets) or 'none'}")

    def compute():
        if name == "options" and not dataset:
            return {}, "the option study reads one dataset: choose it below"
        with open_warehouse(db) as handle:
            try:
                return (entry.function(handle, dataset) if name == "options" else entry.function(handle)), ""
            except BiaslabError as exc:
                return {}, str(exc)

    tables, message = (cache or WarehouseCache()).get(db, ("study", name, dataset), compute)
    shown = {t: _compact(tables[t]) for t in STUDY_TABLES.get(name, list(tables))
             if t in tables and not tables[t].empty}
    default = dataset or (datasets[0] if len(datasets) == 1 else "")
    figures = entry.report is not None and bool(shown) and (name != "options" or bool(dataset))
    return render_template("study.html", name=name, description=entry.description, tables=shown, message=message,
                           dataset=default, option_datasets=option_datasets, compare=entry.compare is not None,
                           figures=FIGURES_SHOWN.get(name, 2) if figures else 0,
                           query=f"?dataset={dataset}" if dataset else "")


#: how many of a study report's figures its page shows first (default 2; the report has the rest). Contextuality's
#: first figure has every setting; its next ones are one setting's each, named only by the report's section headings
FIGURES_SHOWN = {"contextuality": 1}
#: what a figure address answers where the report has no such figure: an SVG saying so (never a broken image)
NO_FIGURE = ('<svg xmlns="http://www.w3.org/2000/svg" width="420" height="24"><text x="4" y="16" font-size="13" '
             'font-family="sans-serif" fill="#777">{}</text></svg>')


def _figure(db: str, name: str, index: int, dataset: str, cache: WarehouseCache) -> Response:
    """Figure `index` of study `name`'s report (`biaslab report NAME`, written once per warehouse state into a
    temporary folder that is removed at once: the PNG bytes are kept in memory)."""
    import html
    import re
    import tempfile

    from ...metrics.registry import studies
    from ..metrics_cmd import write_study_report

    known = studies()
    if name not in known or known[name].report is None:
        abort(404, description=f"no study report named {name[:60]!r}")
    if name == "options" and dataset not in _option_datasets(db):
        abort(404, description="choose a dataset with options: /study/options")

    def render() -> tuple[list[bytes], str]:
        with tempfile.TemporaryDirectory(prefix="biaslab-view-") as folder:
            why = write_study_report(name, {"dataset": dataset} if name == "options" else {}, Path(folder), db)
            index_html = Path(folder) / "index.html"
            if why or not index_html.is_file():
                return [], why or "no report"
            names = re.findall(r"<img src=['\"]([^'\"/]+\.png)['\"]", index_html.read_text(encoding="utf-8"))
            return [(Path(folder) / n).read_bytes() for n in names if (Path(folder) / n).is_file()], ""

    images, why = cache.get(db, ("figures", name, dataset), render)
    if index < len(images):
        return Response(images[index], mimetype="image/png")
    text = f"no figure {index + 1}: {why}" if why else f"the report has {len(images)} figure(s)"
    return Response(NO_FIGURE.format(html.escape(text[:80])), mimetype="image/svg+xml")


def _option_datasets(db: str) -> list[str]:
    with queries.warehouse(db) as wh:
        return [d for (d,) in wh.rows("SELECT DISTINCT dataset FROM option_probs ORDER BY 1")]


#: columns of a study table that hold sentences (a note, a reason): said once under the table, not in every row
NOTE_COLUMNS = ("note", "notes", "reason", "coverage_note")


#: columns a compact table leaves behind its "all columns" toggle: the key (the name is shown), counts that the
#: coverage sums up, and the mark (the row's shading shows it)
SECONDARY_COLUMNS = ("model_key", "n_loaded", "n_missing", "low_coverage", "unresolved_mass")
#: the settings of a collection: behind the toggle where every row has the same (they tell no rows apart)
SETTING_COLUMNS = ("dtype", "backend", "scheme", "mode", "temperature", "top_k", "top_p", "prompt_version",
                   "max_new_tokens", "min_new_tokens", "method", "setting", "seed", "samples", "option_order",
                   "variant")
#: what a number rests on: always in view
COVERAGE_COLUMNS = ("n_used", "n_invalid", "coverage", "valid_share")
#: the most columns a compact table shows
COMPACT_WIDTH = 12


def more_columns(frame: pd.DataFrame) -> list[str]:
    """The columns a study table shows only behind its "all columns" toggle: the secondary ones, the settings with
    one value on every row, and the numbers past COMPACT_WIDTH (the first ones, the row's names and its coverage stay
    in view). A setting whose values differ between rows (temperature, dtype, prompt) stays in view: it is what tells
    two rows apart."""
    more = [c for c in frame.columns if c in SECONDARY_COLUMNS
            or (c in SETTING_COLUMNS and len(frame) > 1 and frame[c].astype(str).nunique() == 1)]
    shown = [c for c in frame.columns if c not in more]
    fixed = [c for c in shown if c in COVERAGE_COLUMNS]
    rest = [c for c in shown if c not in fixed]
    return more + rest[max(0, COMPACT_WIDTH - len(fixed)):]


def _compact(frame: pd.DataFrame) -> tuple[pd.DataFrame, list[str], list[str]]:
    """A table as a page shows it: without its note columns, their sentences said once (`_notes_apart`), and the
    columns behind its "all columns" toggle (`more_columns`)."""
    table, notes = _notes_apart(frame)
    return table, notes, more_columns(table)


def _notes_apart(frame: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """(the table without its note columns, their distinct sentences with the number of rows each applies to)."""
    columns = [c for c in frame.columns if c in NOTE_COLUMNS]
    notes = []
    for column in columns:
        counts = frame[column].dropna().astype(str).str.strip()
        for text, n in counts[counts != ""].value_counts(sort=False).items():
            notes.append(f"{text} ({n} of {len(frame)} rows)" if n < len(frame) else text)
    return frame.drop(columns=columns), notes


def _compare_page(db: str, name: str, args, cache: WarehouseCache):
    """The paired differences between two settings `a` and `b` of study `name` (`?dataset=` for the option study):
    the settings offered are the study's own (a value not among them is a 404), computed once per warehouse state."""
    from ...errors import BiaslabError
    from ...metrics.compare.core import compare_observations, valid_share_gap
    from ...metrics.registry import studies
    from ...warehouse.handle import open_warehouse

    known = {n: s for n, s in studies().items() if s.compare is not None}
    if name not in known:
        abort(404, description=f"no study with comparisons named {name[:60]!r}; studies: {', '.join(known)}")
    dataset = args.get("dataset", "")
    if name == "options" and dataset not in _option_datasets(db):
        abort(404, description="choose a dataset with options: /study/options")

    def observations():
        with open_warehouse(db) as handle:
            try:
                return known[name].comparer(handle, **({"dataset": dataset} if name == "options" else {})), ""
            except BiaslabError as exc:
                return None, str(exc)

    obs, message = cache.get(db, ("observations", name, dataset), observations)
    labels = [] if obs is None else [str(v) for v in obs.settings["label"]]
    a, b = args.get("a", ""), args.get("b", "")
    table, gap = None, ""
    if a or b:
        if a not in labels or b not in labels or a == b:
            abort(404, description=f"choose two different settings of {name}: {', '.join(labels) or 'none stored'}")
        table = cache.get(db, ("compare", name, dataset, a, b), lambda: compare_observations(
            obs, between=[a, b], bootstrap=1000, permutations=2000, seed=0))
        gap = valid_share_gap(table)
        table = table.drop(columns=["study", "setting_a", "setting_b", "model_key_a", "model_key_b"])
        datasets = known[name].dataset_names
        first = table["group"].astype(str).str.split(" · ").str[0]
        if first.isin(datasets).any():  # a group named by its dataset (CrowS-Pairs): the row's stimuli link
            table.insert(1, "dataset", first.where(first.isin(datasets), None))
    table, notes, more = _compact(table) if table is not None else (None, [], [])
    return render_template("compare.html", name=name, labels=labels, a=a, b=b, table=table, gap=gap, notes=notes,
                           more=more,
                           message=message, dataset=dataset or (known[name].dataset_names[0]
                                                                if len(known[name].dataset_names) == 1 else ""))
