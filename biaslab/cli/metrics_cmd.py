"""`biaslab metrics ...` and `biaslab report ...`: statistics and reports computed from stored evidence only."""

from __future__ import annotations

import functools
import html
import json
import shutil
import sys
import textwrap
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

import click

from ..errors import UsageError
from ..metrics.coverage import DEFAULT_MIN_COVERAGE
from .common import Group, db_option, format_option


class StudyGroup(Group):
    """`biaslab metrics` / `biaslab report`: one subcommand per study of `biaslab.metrics.registry`, read when the
    commands are listed or looked up; a built-in study has its hand-written command below, a registered one gets a
    generated command (its options, its description as help)."""

    #: the report group: only the studies with a report writer
    reports = False

    def _studies(self) -> dict:
        from ..metrics.registry import studies

        return {n: s for n, s in studies().items() if not self.reports or s.report is not None}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *self._studies()})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in self.commands:
            return self.commands[name]
        study = self._studies().get(name)
        if study is None or study.builtin:
            return None
        return _report_command(study) if self.reports else _metrics_command(study)


class ReportGroup(StudyGroup):
    reports = True


@click.group("metrics", cls=StudyGroup)
def metrics_group() -> None:
    """Study metrics computed from the warehouse (no model is loaded)."""


@click.group("report", cls=ReportGroup)
def report_group() -> None:
    """HTML reports with tables and figures, computed from the warehouse."""


_OUT = click.option("--out", "out", type=click.Path(dir_okay=False), default=None,
                    help="Also write the tables to this JSON file (strict JSON: the metric tables, biaslab and "
                         "schema versions, the parameters, and the collections the evidence came from), like "
                         "lm-eval's --output_path.")


def _open(db: str):
    """The warehouse as the Python API opens it (`biaslab.open`, read-only)."""
    from ..warehouse.handle import open_warehouse

    return open_warehouse(db)


@contextmanager
def _report_of(out: str, db: str, heading: str):
    """Run a report's body; when the warehouse holds none of the study's evidence (`NoEvidence`), write OUT/index.html
    saying what is missing and how to collect it, and exit 1 with the same line."""
    from ..metrics.missing import NoEvidence

    try:
        yield
    except NoEvidence as exc:
        from ..metrics.html_report import start_page, write_page

        parts = start_page(Path(out), heading, db)
        parts.append(f'<p class="empty">Nothing to report: {html.escape(str(exc))}.</p>')
        click.echo(f"wrote {write_page(Path(out), heading, parts)}")
        raise click.ClickException(str(exc)) from None


def _datasets(study: str) -> list[str]:
    """The datasets of a registered study (`biaslab.metrics.registry`)."""
    from ..metrics.registry import get_study

    return list(get_study(study).dataset_names)


def _study_options(study, f):
    """The click options of a registered study's `StudyOption`s."""
    for opt in reversed(study.options):
        flag = "--" + opt.name.replace("_", "-")
        if isinstance(opt.default, bool):
            f = click.option(flag, opt.name, is_flag=True, default=opt.default, help=opt.help)(f)
        else:
            f = click.option(flag, opt.name, type=opt.type, default=opt.default, show_default=True,
                             help=opt.help)(f)
    return f


def _metrics_command(study) -> click.Command:
    """`biaslab metrics NAME` of a registered study: its metrics function's tables, printed as the built-in ones."""
    def command(db: str, fmt: str, out: str | None, **kwargs) -> None:
        with _open(db) as handle:
            tables = study.function(handle, **kwargs)
            if out:
                _results_artifact(handle, study.name, tables, list(study.dataset_names), kwargs, out)
        _emit_tables(tables, fmt)

    command = _table_options(_OUT(_study_options(study, command)))
    return click.command(study.name, help=study.description)(db_option(format_option(command)))


def _report_command(study) -> click.Command:
    """`biaslab report NAME` of a registered study with a report writer."""
    def command(db: str, out: str, **kwargs) -> None:
        with _report_of(out, db, study.heading or study.description), _open(db) as handle:
            tables = study.function(handle, **kwargs)
            names = handle.models()
        index = study.report_writer(tables, Path(out), db, names)
        if study.compare is not None:
            _add_comparison(Path(index), db, study.name)
        click.echo(f"wrote {index}")

    command = _study_options(study, command)
    command = click.option("--out", "out", type=click.Path(file_okay=False), required=True,
                           help="Output folder.")(command)
    return click.command(study.name, help=study.description)(db_option(command))


def _add_comparison(index: Path, db: str, study: str, **options) -> None:
    """Append the comparison section (`biaslab compare STUDY`, every pair of settings; with one setting, a sentence
    saying so) and the pointer to the evidence in `biaslab view` to a written report."""
    from ..errors import BiaslabError
    from ..metrics.compare.core import comparison_html
    from ..metrics.studies import compare

    with _open(db) as handle:
        try:
            table, reason = compare(handle, study, bootstrap=1000, permutations=2000, **options), ""
        except BiaslabError as exc:
            table, reason = None, str(exc)
        section = comparison_html(table, reason) + _view_links(handle, db, study, options.get("dataset"))
    page = index.read_text(encoding="utf-8")
    index.write_text(page.replace("</body></html>", section + "</body></html>"), encoding="utf-8")


def _view_links(handle, db: str, study: str, dataset: str | None) -> str:
    """The report's pointer to the evidence behind its numbers: `biaslab view` and its stable URLs (the study page,
    the stimulus pages of the study's first stimuli)."""
    import html as _html
    from urllib.parse import urlencode

    from ..metrics.registry import get_study
    from .common import VIEW_URL

    names = [dataset] if dataset else list(get_study(study).dataset_names)
    marks_sql = ", ".join("?" for _ in names) or "NULL"
    ids = list(handle.query(f"SELECT stimulus_id FROM stimuli WHERE dataset IN ({marks_sql}) "
                            "ORDER BY dataset, item_id, stimulus_id LIMIT 3", names)["stimulus_id"])
    study_url = f"{VIEW_URL}/study/{study}" + (f"?{urlencode({'dataset': dataset})}" if dataset else "")
    examples = ", ".join(f'<a href="{VIEW_URL}/stimulus/{i}">{i}</a>' for i in ids)
    return (f'<h2 id="evidence">The evidence behind these numbers</h2><p>Run <code>biaslab view --db '
            f'{_html.escape(db)}</code>, then open <a href="{_html.escape(study_url)}">this study\'s tables</a> '
            f"(each row links to its stimuli) or a stimulus page{': ' + examples if examples else ''}; every "
            "stimulus has the stable address /stimulus/&lt;stimulus_id&gt;.</p>")


def _results_artifact(handle, study: str, tables: dict, datasets, parameters: dict, out: str) -> None:
    """Write the per-collection results file of `--out` (see `biaslab.metrics.results`)."""
    from ..metrics.results import write_results

    write_results(handle, study, {k: v for k, v in tables.items() if not k.startswith("_")}, datasets, parameters,
                  Path(out))


#: --wide and --columns of the running metrics command (set by `_table_options`)
_TABLE_LAYOUT: ContextVar[tuple[bool, list[str]]] = ContextVar("table_layout", default=(False, []))


def _table_options(f):
    """--wide / --columns for a `biaslab metrics` command: how its tables are laid out in a terminal."""
    @functools.wraps(f)
    def command(*args, wide: bool, columns: str | None, **kwargs):
        token = _TABLE_LAYOUT.set((wide, _by(columns or "")))
        try:
            return f(*args, **kwargs)
        finally:
            _TABLE_LAYOUT.reset(token)

    command = click.option("--columns", default=None, metavar="COL[,COL...]",
                           help="Table format: show only these value columns (model and setting columns stay "
                                "in the section lines).")(command)
    return click.option("--wide", is_flag=True,
                        help="Table format: every column in one table however wide (default: tables fit the "
                             "terminal, $COLUMNS or 120, split into column groups that repeat the row labels)."
                        )(command)


def _emit_tables(tables: dict, fmt: str) -> None:
    public = {k: v for k, v in tables.items() if not k.startswith("_")}
    wide, columns = _TABLE_LAYOUT.get()
    if columns and fmt == "table":  # only the tables with a requested column, each with those it has
        unknown = [c for c in columns if not any(c in t.columns for t in public.values())]
        if unknown:
            raise click.UsageError(f"--columns: no table has a column {', '.join(unknown)}")
        public = {k: v for k, v in public.items() if any(c in v.columns for c in columns)}
    if fmt == "json":
        from ..metrics.results import records

        click.echo(json.dumps({k: records(v) for k, v in public.items()}, indent=1, allow_nan=False))
        return
    _emit_frames(public, fmt, wide, columns)
    from ..metrics.coverage import few_clusters_note, low_coverage_note

    marked = low_coverage_note(public, next((t.attrs["min_coverage"] for t in public.values()
                                             if "min_coverage" in t.attrs), DEFAULT_MIN_COVERAGE))
    for line in (marked, few_clusters_note(public)):
        if line and fmt == "table":
            click.echo(textwrap.fill(line, width=shutil.get_terminal_size((120, 24)).columns,
                                     subsequent_indent="    ", break_on_hyphens=False))


def _emit_frames(public: dict, fmt: str, wide: bool, columns: list[str]) -> None:
    for name, frame in public.items():
        if fmt == "csv":
            sys.stdout.write(f"# {name}\n")
            frame.to_csv(sys.stdout, index=False)
        else:
            notes = _notes(frame)
            width = shutil.get_terminal_size((120, 24)).columns
            if frame.empty and frame.attrs.get("empty_because"):  # no empty grid: the title and why
                click.echo(textwrap.fill(f"{name} (0 rows): {frame.attrs['empty_because']}", width=width,
                                         subsequent_indent="    ", break_on_hyphens=False))
                continue
            if notes is not None:  # in a table, a long `note` column would squeeze the others: one line each below
                frame = frame.drop(columns="note")
            from .frames import print_frame

            print_frame(name, frame, width=width, wide=wide, out=sys.stdout,
                        columns=[c for c in columns if c in frame.columns] or None)
            for note in notes or ():
                click.echo(textwrap.fill(f"note: {note}", width=width, subsequent_indent="    ",
                                         break_on_hyphens=False))


def _notes(frame) -> list[str] | None:
    """The distinct non-empty values of a table's `note` column (prefixed with the row's metric `name` where the
    table has one), or None when the table has no `note` column."""
    if "note" not in frame.columns:
        return None
    named = "name" in frame.columns
    notes = []
    for _, row in frame.iterrows():
        note = row["note"]
        if isinstance(note, str) and note:
            notes.append(f"{row['name']}: {note}" if named else note)
    return list(dict.fromkeys(notes))


_MIN_COVERAGE = click.option(
    "--min-coverage", "min_coverage", type=click.FloatRange(0, 1), default=DEFAULT_MIN_COVERAGE, show_default=True,
    help="Mark (low_coverage = True, and a line under the tables) every score resting on less than this share of "
         "the loaded units (templates, items, stimuli, sentences), or on a valid share of answers below it.")
_MI = click.option("--mi", "mi", type=click.Choice(["per-template", "pooled", "both"]), default="per-template",
                   show_default=True,
                   help="Mutual information: per-template (the paper's I[X_i; F_i] per template, averaged over "
                        "templates, with standard errors: table mutual_information), pooled (measurements of all "
                        "templates pooled, so role, case and stereotype rating have a value: table "
                        "mutual_information_pooled), or both.")
_TEMPERATURES = click.option(
    "--temperatures", default=None, metavar="T1,T2,...",
    help="Temperature robustness (the paper's Figures 8 and 9): re-derive every metric at these temperatures "
         "(e.g. 0.3,0.5,0.7; top_k as collected) from the stored exact-mode evidence through choice_probs_at, no "
         "model run; adds the temperature_* tables and the overlap of contextual pairs across temperatures.")


def _temperatures(text: str | None) -> list[float]:
    """The parsed --temperatures (empty when not given); a bad value is one clear usage error."""
    from ..metrics.contextuality.tables import parse_temperatures

    if text is None:
        return []
    try:
        return parse_temperatures(text)
    except ValueError as e:
        raise click.UsageError(str(e)) from None


@metrics_group.command("contextuality")
@db_option
@format_option
@click.option("--draws", type=int, default=20, show_default=True,
              help="Exact mode, pooled mutual information (--mi pooled / both): measurements drawn per stimulus "
                   "from its exact distribution.")
@click.option("--bootstrap", type=int, default=30, show_default=True,
              help="Pooled mutual information: bootstrap resamples of templates (SE).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for draws and bootstrap.")
@click.option("--by-order", is_flag=True,
              help="Also print the per-option-order tables (pf_by_order, kl_by_order, spearman_by_order); the "
                   "default tables pool both orders per template, as the paper.")
@_MI
@_TEMPERATURES
@_MIN_COVERAGE
@_OUT
@_table_options
def contextuality_command(db: str, fmt: str, draws: int, bootstrap: int, seed: int, by_order: bool, mi: str,
                          temperatures: str | None, out: str | None, min_coverage: float) -> None:
    """Contextual invariance on WinoPron: valid measurements per context and order (the paper's Table 3); p(feminine),
    KL to unprimed and Spearman with Misersky ratings with both option orders pooled per template (as the paper;
    --by-order adds the per-order tables); mutual information with prompt features; Contextuality-by-Default
    fractions per order and model overlap; with --temperatures, all of them re-derived at other temperatures."""
    from ..metrics.studies import contextuality

    temps = _temperatures(temperatures)
    with _open(db) as handle:
        tables = contextuality(handle, draws=draws, bootstrap=bootstrap, seed=seed, mi=mi, by_order=by_order,
                               temperatures=temps, min_coverage=min_coverage)
        if out:
            _results_artifact(handle, "contextuality", tables, _datasets("contextuality"),
                              {"draws": draws, "bootstrap": bootstrap, "seed": seed, "by_order": by_order, "mi": mi,
                               "temperatures": temps}, out)
    _emit_tables(tables, fmt)


@report_group.command("contextuality")
@db_option
@click.option("--out", "out", type=click.Path(file_okay=False), required=True, help="Output folder.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for draws and bootstrap.")
@_MI
@_TEMPERATURES
@_MIN_COVERAGE
def contextuality_report_command(db: str, out: str, seed: int, mi: str, temperatures: str | None,
                                 min_coverage: float) -> None:
    """Write OUT/index.html: p(f | c) distributions, mean KL, correlation bars with significance stars, mutual
    information with error bars, contextual fractions, model-overlap matrix; one section per model setting, with the
    pooled tables (as the paper) and the per-order ones; with --temperatures, a temperature-robustness section."""
    from ..metrics.contextuality.report import write_report
    from ..metrics.studies import contextuality

    temps = _temperatures(temperatures)
    with _report_of(out, db, "Contextual invariance"), _open(db) as handle:
        tables = contextuality(handle, seed=seed, mi=mi, temperatures=temps, private=True,
                               min_coverage=min_coverage)
        names = handle.models()
    index = write_report(tables, Path(out), db, names)
    _add_comparison(index, db, study="contextuality")
    click.echo(f"wrote {index}")


@metrics_group.command("negation")
@db_option
@format_option
@click.option("--intercept-only-on-failure", is_flag=True,
              help="Also fit (clearly labelled) random-intercept-only models where the random-slope fit fails.")
@_MIN_COVERAGE
@_OUT
@_table_options
def negation_command(db: str, fmt: str, intercept_only_on_failure: bool, out: str | None,
                     min_coverage: float) -> None:
    """Negation bias: perplexity (causal) or pseudo-perplexity (masked) per sentence, and per model the linear mixed
    model PPL ~ context * form with a random intercept and a random slope for context by root item (statsmodels;
    stereotype-consistent = 1, affirmative = 1): Wald z p-values (the paper's) and Satterthwaite-df t p-values (as
    lmerTest) side by side; singular fits flagged (also where statsmodels stops short of a boundary optimum).
    Tables: mixed_model, predicted_values (the paper's Figure 2), condition_means, length_control (share of root
    items whose four sentences have equal token counts, per tokenizer). Convergence problems are reported in the
    table, never hidden."""
    from ..metrics.studies import negation

    with _open(db) as handle:
        tables = negation(handle, intercept_only_on_failure=intercept_only_on_failure, sentences=False,
                          min_coverage=min_coverage)
        if out:
            _results_artifact(handle, "negation", tables, _datasets("negation"),
                              {"intercept_only_on_failure": intercept_only_on_failure}, out)
    _emit_tables(tables, fmt)


@metrics_group.command("metaprompt")
@db_option
@format_option
@click.option("--by-context/--no-by-context", default=True, show_default=True,
              help="Also give the table per priming context (metaprompt_by_context).")
@_MIN_COVERAGE
@_OUT
@_table_options
def metaprompt_command(db: str, fmt: str, by_context: bool, out: str | None, min_coverage: float) -> None:
    """Metaprompting comprehension checks (the contextual-invariance paper's Table 4): per model, setting and
    question (anaphora, part_of_speech, tracking), accuracy = mean over prompts of the probability of the gold
    answer (exact mode; sample mode: share of samples), its SE over prompts, the valid mass and the accuracy among
    valid answers. Evidence from `runners collect --dataset winopron --protocol meta`."""
    from ..metrics.studies import metaprompt

    with _open(db) as handle:
        tables = metaprompt(handle, by_context=by_context, min_coverage=min_coverage)
        if out:
            _results_artifact(handle, "metaprompt", tables, _datasets("metaprompt"), {"by_context": by_context}, out)
    _emit_tables(tables, fmt)


_CAL_PAIR = click.option(
    "--pair", "pairs", multiple=True, metavar="[KIND:]REFERENCE=OTHER",
    help="Declare a model pair for the % change table (the paper's Tables 6 and 11), e.g. size:small=large or "
         "distillation:teacher=student; each side a model name or a model key (prefix of >= 6 characters). "
         "pct_change = 100 * (OTHER - REFERENCE) / |REFERENCE| per metric. Repeatable.")


def _calibration(handle, dataset: str | None, pairs: tuple[str, ...], **kwargs) -> dict:
    """`biaslab.metrics.studies.calibration`, a bad --pair reported as the option's error."""
    from ..metrics.studies import PairError, calibration

    try:
        return calibration(handle, dataset, pairs=pairs, **kwargs)
    except PairError as exc:
        raise click.BadParameter(str(exc), param_hint="--pair") from None


@metrics_group.command("calibration")
@db_option
@format_option
@click.option("--dataset", default=None, help="Only this dataset (e.g. gece-winobias); default: every pair dataset.")
@click.option("--bins", type=int, default=10, show_default=True, help="Bins of the ECE family.")
@click.option("--bootstrap", type=int, default=1000, show_default=True, help="Bootstrap resamples for 95% intervals.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the bootstrap, split and ablation.")
@_CAL_PAIR
@_MIN_COVERAGE
@_OUT
@_table_options
def calibration_command(db: str, fmt: str, dataset: str | None, bins: int, bootstrap: int, seed: int,
                        pairs: tuple[str, ...], out: str | None, min_coverage: float) -> None:
    """Calibration of pronoun-pair probabilities: ECE (the paper's male-class ECE with equal-width bins first, then
    equal mass and the top-label ECEs, labelled), MacroCE, ICE, Brier (gold label; and, labelled
    brier_upstream_convention with a note, the GECE code's convention), Gender-ECE with its parts (ECE of the items
    predicted male / female) and their gap, cc-ECE with its parts (ECE by gold gender), human alignment, all with
    bootstrap intervals; post-hoc Beta / isotonic / Platt / temperature calibration on a seeded half split (ECE
    before / after in both conventions); sample-size ablation in both conventions; GenderLex variants; WinoQueer per
    identity group; with --pair, the % change between model pairs."""
    with _open(db) as handle:
        tables = _calibration(handle, dataset, pairs, bins=bins, bootstrap=bootstrap, seed=seed, reliability=False,
                              min_coverage=min_coverage)
        if out:
            used = set(tables["metrics"].get("dataset", [])) | set(tables["winoqueer"].get("dataset", []))
            _results_artifact(handle, "calibration", tables, sorted(used),
                              {"dataset": dataset, "bins": bins, "bootstrap": bootstrap, "seed": seed,
                               "pairs": list(pairs)}, out)
    _emit_tables(tables, fmt)


@report_group.command("calibration")
@db_option
@click.option("--out", "out", type=click.Path(file_okay=False), required=True, help="Output folder.")
@click.option("--dataset", default=None, help="Only this dataset.")
@click.option("--bootstrap", type=int, default=1000, show_default=True, help="Bootstrap resamples for 95% intervals.")
@_CAL_PAIR
@_MIN_COVERAGE
def calibration_report_command(db: str, out: str, dataset: str | None, bootstrap: int,
                               pairs: tuple[str, ...], min_coverage: float) -> None:
    """Write OUT/index.html: calibration metrics with intervals (the paper's male-class ECE first; Gender-ECE /
    cc-ECE parts by gender side by side, the upstream Brier convention labelled), reliability diagrams with per-bin
    counts (equal width and equal mass, before and after post-hoc calibration), post-hoc calibration table and
    figure, sample-size ablation, GenderLex variants side by side, WinoQueer per identity group, and the % change
    between the model pairs declared with --pair (or a sentence saying none was declared)."""
    from ..metrics.calibration.report import write_report

    with _report_of(out, db, "Pronoun calibration"), _open(db) as handle:
        tables = _calibration(handle, dataset, pairs, bootstrap=bootstrap, private=True, min_coverage=min_coverage)
        names = handle.models()
    index = write_report(tables, Path(out), db, names)
    _add_comparison(index, db, study="calibration", **({"dataset": dataset} if dataset else {}))
    click.echo(f"wrote {index}")


@report_group.command("negation")
@db_option
@click.option("--out", "out", type=click.Path(file_okay=False), required=True, help="Output folder.")
def negation_report_command(db: str, out: str) -> None:
    """Write OUT/index.html: per model, the paper's Figure 2 (predicted PPL per condition from the mixed model,
    x = context, one line per form), the mixed-model table (Wald and Satterthwaite p-values, singular fits
    flagged), the length control and the observed condition means with their plot."""
    from ..metrics.negation.report import write_report
    from ..metrics.studies import negation_sentences

    with _report_of(out, db, "Negation bias"), _open(db) as handle:
        ppl = negation_sentences(handle)
        names = handle.models()
    index = write_report(ppl, Path(out), db, names)
    _add_comparison(index, db, study="negation")
    click.echo(f"wrote {index}")


_NO_PRONOUN = click.option(
    "--no-pronoun", type=click.Choice(["correct", "exclude"]), default="correct", show_default=True,
    help="Binary correctness of a continuation without a pronoun: correct (the paper's automatic metric) or "
         "exclude it from agreement and Beta fits (outcome shares always show it separately).")
_VOCABULARY = click.option(
    "--vocabulary", type=click.Choice(["biaslab", "upstream"]), default="biaslab", show_default=True,
    help="Pronoun sets that decide a continuation: biaslab (the documented sets stored with each request: "
         "'themselves' counts as they, RUFF also detects independent possessives and reflexives) or upstream (the "
         "exact sets of the paper's scripts, to reproduce its automatic numbers).")


@metrics_group.command("misgendering")
@db_option
@format_option
@_NO_PRONOUN
@_VOCABULARY
@_MIN_COVERAGE
@_OUT
@_table_options
def misgendering_command(db: str, fmt: str, no_pronoun: str, vocabulary: str, out: str | None,
                         min_coverage: float) -> None:
    """Misgendering meta-evaluation (MISGENDERED, RUFF, TANGO): correctness per method, model, dataset, pronoun and
    context (pre / post / template); instance-level std; raw agreement, Cohen's kappa and MCC between the
    probability- and generation-based methods over all samples, each +- 1.96 x a standard error over instances
    (NaN with a note when a method is constant), and the paper's first-continuation tables
    (agreement_first_sample: kappa +- 1.96 x asymptotic SE, MCC with its Fisher 95% interval, raw agreement +- SEM);
    Beta method-of-moments fit of per-instance disagreement per context; repetition rate and no-pronoun rate; human
    annotation agreement per cell and the label breakdown when annotations were imported."""
    from ..metrics.studies import misgendering

    with _open(db) as handle:
        tables = misgendering(handle, no_pronoun=no_pronoun, vocabulary=vocabulary, min_coverage=min_coverage)
        if out:
            _results_artifact(handle, "misgendering", tables, _datasets("misgendering"),
                              {"no_pronoun": no_pronoun, "vocabulary": vocabulary}, out)
    _emit_tables(tables, fmt)


@report_group.command("misgendering")
@db_option
@click.option("--out", "out", type=click.Path(file_okay=False), required=True, help="Output folder.")
@_NO_PRONOUN
@_VOCABULARY
@_MIN_COVERAGE
def misgendering_report_command(db: str, out: str, no_pronoun: str, vocabulary: str,
                                min_coverage: float) -> None:
    """Write OUT/index.html: the Beta fits of all models on one plot per dataset (as the paper), correctness bars
    per pronoun with 95% intervals, agreement tables with their +- terms, Beta (alpha, beta) table of
    disagreement, instance spread, generation quality (one section per model); human annotation: label breakdown
    and human-vs-automatic agreement per cell."""
    from ..metrics.misgendering.report import write_report
    from ..metrics.studies import misgendering

    with _report_of(out, db, "Misgendering meta-evaluation"), _open(db) as handle:
        tables = misgendering(handle, no_pronoun=no_pronoun, vocabulary=vocabulary, private=True,
                              min_coverage=min_coverage)
        names = handle.models()
    index = write_report(tables, Path(out), db, names)
    _add_comparison(index, db, study="misgendering")
    click.echo(f"wrote {index}")


def _options_flags(f):
    """The options shared by `metrics options` and `report options`."""
    for decorator in reversed([
        click.option("--dataset", required=True, help="The dataset: built in, or your own (biaslab data load)."),
        click.option("--by", "by", default="", metavar="COL[,COL...]",
                     help="Group by these columns of stimuli (context, option_order, grammatical_case, occupation, "
                          "...) or keys of its attrs (e.g. a spec filler's attribute), comma-separated."),
        click.option("--contrast", default=None, metavar="COL=A:B",
                     help="Paired difference between two values of a column for the same item (e.g. "
                          "context=primed_f:unprimed), with its bootstrap interval and a sign-flip permutation "
                          "p-value."),
        click.option("--reference", default=None, metavar="VALUE",
                     help="KL divergence of each group's option distribution to this group (one --by column)."),
        click.option("--spearman", default=None, metavar="COL",
                     help="Spearman correlation of each option's probability with this numeric column (e.g. "
                          "stereotype_rating or a filler attribute) over the study's units, with a bootstrap "
                          "interval; the report draws it as a scatter."),
        click.option("--unit", default=None, metavar="COL",
                     help="The study's unit for --spearman: a column whose value the items of one unit share (e.g. "
                          "name, when every name is asked in several templates). Default: the unit your spec "
                          "declares (unit:), else the item."),
        click.option("--temperatures", default=None, metavar="T1,T2,...",
                     help="Also re-derive the exact-mode choice collections at these temperatures from their stored "
                          "trie evidence (no model runs); each shows as its own setting ('... at T=0.3 top_k=40')."),
        click.option("--top-k", "top_k", type=int, default=None, metavar="K",
                     help="With --temperatures: re-derive at this top-k (at most the collection's --k-store); "
                          "default each collection's own."),
        click.option("--bootstrap", type=click.IntRange(min=100), default=1000, show_default=True,
                     help="Bootstrap resamples of the intervals."),
        click.option("--seed", type=int, default=0, show_default=True, help="Seed of the bootstrap and permutations."),
        click.option("--all-versions", is_flag=True,
                     help="Your dataset at every version loaded, not only the current one."),
        _MIN_COVERAGE,
    ]):
        f = decorator(f)
    return f


def _by(text: str) -> list[str]:
    return [c.strip() for c in text.split(",") if c.strip()]


def _rederive(temperatures: str | None, top_k: int | None) -> dict:
    """--temperatures / --top-k of the options commands, checked: {} without --temperatures."""
    from ..metrics.contextuality.tables import parse_temperatures
    from ..metrics.options.tables import parse_top_k

    if temperatures is None:
        if top_k is not None:
            raise UsageError("--top-k re-derives with --temperatures: give both (e.g. --temperatures 0.5 --top-k 20)")
        return {}
    return {"temperatures": parse_temperatures(temperatures), "top_k": parse_top_k(top_k)}


@metrics_group.command("options")
@db_option
@format_option
@_options_flags
@_OUT
@_table_options
def options_command(db: str, fmt: str, dataset: str, by: str, contrast, reference, spearman, unit, temperatures,
                    top_k, bootstrap: int, seed: int, all_versions: bool, min_coverage: float,
                    out: str | None) -> None:
    """Generic metrics of any dataset with options (your own study or a built-in one), from stored evidence of every
    protocol that measures an option (prob, choice exact, choice sample): per collection and group, the mean
    probability of each option label over items (renormalized over the valid options; the invalid share as
    invalid_mass) with a 95% bootstrap interval and the number of items; --contrast, --reference, --spearman as
    below; calibration (accuracy, ECE, Brier) where stimuli have a gold option. Also `biaslab.options(...)` in
    Python and the view option_probs in SQL.

    The order table gives each option's mean probability per position in the prompt's list (large: a spread of 0.2
    or more, which a mean over both orders hides).

    Example: biaslab metrics options --dataset my-study --by context --contrast context=primed_f:unprimed
    """
    from ..metrics.studies import options

    rederive = _rederive(temperatures, top_k)
    with _open(db) as handle:
        tables = options(handle, dataset, by=_by(by), contrast=contrast, reference=reference, spearman=spearman,
                         bootstrap=bootstrap, seed=seed, all_versions=all_versions, min_coverage=min_coverage,
                         unit=unit, **rederive)
        if out:
            _results_artifact(handle, "options", tables, [dataset],
                              {"dataset": dataset, "by": _by(by), "contrast": contrast, "reference": reference,
                               "spearman": spearman, "unit": unit, "bootstrap": bootstrap, "seed": seed,
                               **rederive}, out)
    _emit_tables(tables, fmt)


@report_group.command("options")
@db_option
@click.option("--out", "out", type=click.Path(file_okay=False), required=True, help="Output folder.")
@_options_flags
def options_report_command(db: str, out: str, dataset: str, by: str, contrast, reference, spearman, unit,
                           temperatures, top_k, bootstrap: int, seed: int, all_versions: bool,
                           min_coverage: float) -> None:
    """Write OUT/index.html for a dataset with options: per collection, bars of each option's mean probability per
    group with 95% intervals, the option-order effect (said in words where it is large), the paired contrast per item
    for every option (--contrast), a scatter of each option's probability against a numeric column with Spearman's
    rho and its interval over the study's units (--spearman, --unit), a reliability diagram where stimuli have a
    gold option, and the tables of `biaslab metrics options`."""
    from ..metrics.options.report import write_report
    from ..metrics.options.tables import parse_contrast
    from ..metrics.studies import options

    rederive = _rederive(temperatures, top_k)
    with _report_of(out, db, f"Options of {dataset}"), _open(db) as handle:
        tables = options(handle, dataset, by=_by(by), contrast=contrast, reference=reference, spearman=spearman,
                         bootstrap=bootstrap, seed=seed, all_versions=all_versions, private=True,
                         min_coverage=min_coverage, unit=unit, **rederive)
        names = handle.models()
    index = write_report(tables, Path(out), db, dataset, _by(by), parse_contrast(contrast) if contrast else None,
                         names)
    _add_comparison(index, db, study="options", dataset=dataset, by=_by(by), all_versions=all_versions)
    click.echo(f"wrote {index}")


@click.group("annotate", cls=Group)
def annotate_group() -> None:
    """Human labels of generated continuations (misgendering): export a sheet, import the labels."""


@annotate_group.command("export")
@db_option
@click.option("--out", "out", type=click.Path(dir_okay=False), required=True, help="CSV file to write.")
@click.option("--n", "n", type=int, default=25, show_default=True,
              help="Continuations drawn at random per model x dataset x pronoun x context cell (the paper: 25).")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed of the draws (each cell's draw depends only on this seed and the cell).")
@click.option("--dataset", default=None, help="Only this dataset (one of the misgendering study's).")
def annotate_export_command(db: str, out: str, n: int, seed: int, dataset: str | None) -> None:
    """Write a CSV stratified as the paper's annotation sheets: per model x dataset x declared pronoun x context
    (pre / post) cell, N random continuations (sample_id, model, dataset, declared, context, prompt_text, text, and
    empty label / extraneous_gendered / note / annotator columns). The heuristic's outcome is not shown."""
    from ..metrics.misgendering.annotations import export_sheet

    if n < 1:
        raise click.UsageError("--n must be at least 1")
    with _open(db) as handle:
        written = export_sheet(handle, Path(out), n, seed, dataset)
    click.echo(f"wrote {written} continuations to {out}")


@annotate_group.command("import")
@click.argument("file", type=click.Path(dir_okay=False, exists=True))
@db_option
def annotate_import_command(file: str, db: str) -> None:
    """Import FILE (CSV with sample_id, label = correct | misgendering | no_pronoun | plural_they,
    extraneous_gendered = true | false, annotator, and an optional free-text note) into the `annotations` table.
    The whole file is checked first: any bad row stops the import with file, line and field, and nothing is
    written. Re-importing adds nothing."""
    from ..metrics.misgendering.annotations import import_annotations
    from ..warehouse import Warehouse

    with Warehouse.open(db) as wh:
        read, added = import_annotations(wh, Path(file))
    click.echo(f"{file}: {read} annotations read, {added} new")


def write_study_report(study: str, options: dict, folder: Path, db: str) -> str:
    """Write what `biaslab report STUDY --out FOLDER --db DB` writes (its comparison section included), quietly:
    the audit leaderboard links these reports and `biaslab view` shows their figures. "" when written, else why not
    (one line)."""
    import contextlib
    import io

    args = [study, "--out", str(folder), "--db", db, *(a for k, v in options.items() for a in (f"--{k}", v))]
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            report_group.main(args, prog_name="biaslab report", standalone_mode=False)
    except click.ClickException as exc:
        return exc.format_message()
    return ""
