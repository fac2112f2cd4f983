"""Human annotation of generated continuations (misgendering meta-evaluation, Subramonian et al. 2025): export a
sheet to label, import labels into the `annotations` table, and agreement of the automatic first-pronoun heuristic
with humans and between annotators.

Labels: correct | misgendering | no_pronoun | plural_they (the paper's annotation labels, upstream
`manual-annotations.py`; the heuristic's outcomes are correct | misgendered | no_pronoun), plus
`extraneous_gendered` (true / false): gendered language about the referent other than pronouns, and a free-text
`note`. The paper's binary mapping of a human label (upstream `annot_map`): misgendering -> 0, every other label
(correct, no_pronoun, plural_they) -> 1; the heuristic's binary label is its automatic correctness (no_pronoun ->
correct).

The sheet is stratified as the paper's (upstream `sample-for-manual-verification.py`): per model x dataset x
declared pronoun x context (pre / post [MASK]; TANGO: prompt) cell, N continuations (default 25), drawn without
replacement with a seed derived from (seed, cell), so adding a model does not change the other cells' draws.

Agreement on labels with k classes: raw agreement p_o and Cohen's kappa (p_o - p_e) / (1 - p_e), p_e = sum_c
p_1(c) p_2(c) from the two raters' marginals; NaN (with a note) when 1 - p_e = 0 (both raters constant and equal).
The +- terms (as the paper): raw agreement +- the standard error of the mean (scipy.stats.sem), kappa +- 1.96 x
its asymptotic standard error (`kappa_asymptotic_se`, statsmodels' `cohens_kappa`).
"""

from __future__ import annotations

import csv
import hashlib
import itertools
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from ... import errors
from ...errors import NoEvidence, UsageError
from ...loaders.errors import DataError
from ...loaders.readers import read_table
from ...loaders.sheet_cells import neutralize, restore
from .stats import Z95, kappa_asymptotic_se, standard_error_of_mean

LABELS = ("correct", "misgendering", "no_pronoun", "plural_they")
#: human label -> the paper's binary correctness (upstream `annot_map`)
LABEL_CORRECT = {"correct": 1, "misgendering": 0, "no_pronoun": 1, "plural_they": 1}
#: heuristic outcome -> human label vocabulary
AUTO_TO_LABEL = {"correct": "correct", "misgendered": "misgendering", "no_pronoun": "no_pronoun"}
#: required columns of an annotation file; `note` is read when present
COLUMNS = ("sample_id", "label", "extraneous_gendered", "annotator")
#: the columns of an exported sheet, in order (the heuristic's outcome is never shown)
SHEET_COLUMNS = ("sample_id", "model", "dataset", "declared", "context", "prompt_text", "text", "label",
                 "extraneous_gendered", "note", "annotator")
#: the cell of the stratified sheet and of the per-cell tables
CELL = ["model_key", "dataset", "declared", "context"]
_TRUE, _FALSE = {"true", "1", "yes", "y", "t"}, {"false", "0", "no", "n", "f"}


def nominal_agreement(a, b) -> tuple[int, float, float, str]:
    """(n, raw agreement, Cohen's kappa, note) of two label sequences of equal length (any hashable labels)."""
    a, b = list(a), list(b)
    if len(a) != len(b):
        raise errors.DataError(f"label sequences differ in length ({len(a)} vs {len(b)})")
    n = len(a)
    if n == 0:
        return 0, np.nan, np.nan, "no shared samples"
    p_o = sum(x == y for x, y in zip(a, b)) / n
    labels = set(a) | set(b)
    p_e = sum((a.count(c) / n) * (b.count(c) / n) for c in labels)
    if 1 - p_e <= 1e-15:
        return n, p_o, np.nan, "both raters use one and the same label: kappa undefined"
    return n, p_o, (p_o - p_e) / (1 - p_e), ""


def cell_seed(seed: int, cell: tuple) -> int:
    """The seed of one cell's draw: the first 8 bytes of sha256(seed, cell values), so a cell's draw depends only on
    `seed` and the cell."""
    key = "\x1f".join(str(v) for v in (seed, *cell)).encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "big")


def stratified_sample(frame: pd.DataFrame, n: int, seed: int = 0) -> pd.DataFrame:
    """Per cell (`CELL`: model, dataset, declared pronoun, context), min(n, cell size) rows drawn without replacement
    (numpy `Generator.choice` seeded by `cell_seed`, over the cell's rows in sample_id order), cells in sorted order,
    rows in sample_id order within a cell."""
    if n < 1:
        raise UsageError(f"n must be at least 1, got {n}")
    parts = []
    for cell, group in frame.sort_values("sample_id", kind="stable").groupby(CELL, sort=True):
        rng = np.random.default_rng(cell_seed(seed, cell))
        picked = np.sort(rng.choice(len(group), size=min(n, len(group)), replace=False))
        parts.append(group.iloc[picked])
    return pd.concat(parts, ignore_index=True) if parts else frame.iloc[0:0]


def export_sheet(handle, out: Path, n: int = 25, seed: int = 0, dataset: str | None = None) -> int:
    """Write a CSV to label: per model x dataset x declared pronoun x context cell, `n` continuations drawn at random
    (`stratified_sample`; the paper: 25 per model, pronoun and pre / post cell). Columns `SHEET_COLUMNS`: the
    model's name, the prompt and continuation, and empty label / extraneous_gendered / note / annotator columns;
    the heuristic's outcome is NOT shown. A cell a spreadsheet would read as a formula (starting with =, +, -, @,
    tab or CR) gets a leading `'` (`loaders.sheet_cells.neutralize`; `read_annotations` removes it). Returns the
    number of rows written.

    Raises ValueError when the warehouse (or `dataset`) has no generated samples."""
    from ...warehouse.catalog import model_names_of

    gen = handle.table("gen_samples")
    if dataset:
        gen = gen.filter(gen.dataset == dataset)
    frame = handle.fetch(gen.select("sample_id", "model_key", "dataset", "declared", "context", "prompt_text",
                                    "text").order_by("sample_id"))
    if frame.empty:
        raise NoEvidence(f"{handle.path}: no generated samples{' for ' + dataset if dataset else ''} to annotate")
    chosen = stratified_sample(frame, n, seed)
    names = model_names_of(chosen["model_key"], handle.models())["model_name"].to_numpy()
    chosen = chosen.assign(model=names, label="", extraneous_gendered="", note="", annotator="")
    sheet = chosen[list(SHEET_COLUMNS)].map(neutralize)  # no cell is a spreadsheet formula (loaders.sheet_cells)
    sheet.to_csv(out, index=False, quoting=csv.QUOTE_NONNUMERIC)
    return len(chosen)


#: the sheet's cells that are stored: a NUL in one of them is refused
STORED_CELLS = ("sample_id", "label", "extraneous_gendered", "annotator", "note")


def read_annotations(path: Path, known: set[str]) -> list[dict]:
    """Validated rows of an annotation CSV (an exported sheet, filled in): sample_id, label (one of `LABELS`,
    any case), extraneous_gendered (true/false, 1/0, yes/no), annotator (not empty), and `note` (free text, may be
    empty) when the file has that column; other columns (model, prompt, text, ...) are ignored. Any bad row raises
    DataError naming file, line and field; a (sample, annotator) twice is an error naming both lines. A cell the
    export neutralized (`'=...`) is read restored (`loaders.sheet_cells.restore`)."""
    rows = []
    seen: dict[tuple[str, str], int] = {}
    for rec in read_table(path, COLUMNS, allow_extra_cells=False, allow_nul=True):  # its own cells are checked
        rec = replace(rec, values={k: restore(v) for k, v in rec.values.items()})  # undo the export's `'`
        for column, value in rec.values.items():  # the cells stored (sheet columns such as text are ignored)
            if column in STORED_CELLS and isinstance(value, str) and "\x00" in value:
                raise rec.error("holds a NUL character (a damaged or binary file?)", column)
        sample_id = rec.get("sample_id").strip()
        if sample_id not in known:
            raise rec.error(f"unknown sample_id {sample_id!r} (not a stored generated sample in this warehouse)",
                            "sample_id")
        label = rec.get("label").strip().lower()
        if label not in LABELS:
            raise rec.error(f"label {rec.get('label')!r} is not one of {list(LABELS)}", "label")
        flag = rec.get("extraneous_gendered").strip().lower()
        if flag not in _TRUE | _FALSE:
            raise rec.error(f"extraneous_gendered {rec.get('extraneous_gendered')!r} is not true/false",
                            "extraneous_gendered")
        annotator = rec.get("annotator").strip()
        if not annotator:
            raise rec.error("empty annotator", "annotator")
        key = (sample_id, annotator)
        if key in seen:
            raise rec.error(f"sample {sample_id} labelled twice by {annotator!r} (also line {seen[key]})", "sample_id")
        seen[key] = rec.line
        rows.append({"sample_id": sample_id, "annotator": annotator, "label": label,
                     "extraneous_gendered": flag in _TRUE, "note": rec.get("note", required=False).strip(),
                     "line": rec.line})
    return rows


def import_annotations(wh, path: Path) -> tuple[int, int]:
    """Validate the whole file, then append it in one transaction. Returns (rows read, rows added).

    Re-importing identical rows adds nothing; a row that would change a stored label (same sample and annotator)
    is an error naming its line, and nothing is written. The note is stored with the label (schema version 5)."""
    known = set(wh.query("SELECT sample_id FROM gen_samples")["sample_id"])
    rows = read_annotations(Path(path), known)
    if not rows:
        raise DataError(Path(path), "no annotation rows")
    stored = {(sid, who): (label, flag) for sid, who, label, flag in wh.query(
        "SELECT sample_id, annotator, label, extraneous_gendered FROM annotations").itertuples(index=False)}
    for r in rows:
        before = stored.get((r["sample_id"], r["annotator"]))
        if before is not None and before != (r["label"], r["extraneous_gendered"]):
            raise DataError(Path(path), f"sample {r['sample_id']} is already labelled by {r['annotator']!r} as "
                                        f"{before[0]} (extraneous_gendered {before[1]}); labels are never "
                                        f"overwritten: use another annotator name for a revision",
                            line=r["line"], field="label")
    now = datetime.now(timezone.utc).replace(tzinfo=None)
    table = pa.Table.from_pylist([{**{k: v for k, v in r.items() if k != "line"}, "source_file": str(path),
                                   "imported_at": now} for r in rows])
    return len(rows), wh.append("annotations", table)



LABEL_COLUMNS = [*CELL, "annotator", "n", *(f"n_{label}" for label in LABELS), "extraneous_gendered_rate",
                 "extraneous_gendered_sem"]
CELL_AGREEMENT_COLUMNS = [*CELL, "annotator", "n", "human_correct", "auto_correct", "raw_agreement_binary",
                          "raw_agreement_binary_sem", "raw_agreement", "cohen_kappa", "cohen_kappa_pm", "note"]


def label_breakdown(merged: pd.DataFrame) -> pd.DataFrame:
    """The paper's Figure 7: per cell (`CELL`) and annotator, the count of each human label (`n_correct`,
    `n_misgendering`, `n_no_pronoun`, `n_plural_they`), and the extraneous-gendered-word rate +- its standard
    error of the mean (upstream `extr_mean_data` / `extr_std_data`)."""
    rows = []
    for key, group in merged.groupby([*CELL, "annotator"], sort=True):
        counts = group["label"].value_counts()
        flags = group["extraneous_gendered"].astype(float)
        rows.append({**dict(zip([*CELL, "annotator"], key)), "n": len(group),
                     **{f"n_{label}": int(counts.get(label, 0)) for label in LABELS},
                     "extraneous_gendered_rate": float(flags.mean()),
                     "extraneous_gendered_sem": standard_error_of_mean(flags)})
    return pd.DataFrame(rows, columns=LABEL_COLUMNS)


def _kappa_with_se(a, b) -> tuple[float, float, float, str]:
    """(raw agreement, kappa, Z95 x asymptotic SE, note) of two label sequences."""
    n, raw, kappa, note = nominal_agreement(a, b)
    if n == 0 or not np.isfinite(kappa):
        return raw, kappa, np.nan, note
    labels = sorted(set(a) | set(b))
    table = pd.crosstab(pd.Categorical(list(a), labels), pd.Categorical(list(b), labels), dropna=False)
    _, se = kappa_asymptotic_se(table.to_numpy())
    return raw, kappa, Z95 * se, note


def cell_agreement(merged: pd.DataFrame) -> pd.DataFrame:
    """Human vs automatic per cell and annotator, as the paper's human-agreement figures: `raw_agreement_binary`
    +- `raw_agreement_binary_sem` (mean and scipy.stats.sem of human binary == automatic binary, `LABEL_CORRECT`
    vs the heuristic's correctness), and on the labels themselves (the heuristic's three outcomes vs the four
    human labels; plural_they never equals an automatic label) `raw_agreement`, `cohen_kappa` +- `cohen_kappa_pm`.
    """
    rows = []
    for key, group in merged.groupby([*CELL, "annotator"], sort=True):
        human = group["label"].map(LABEL_CORRECT).to_numpy()
        auto = (group["outcome"] != "misgendered").astype(int).to_numpy()
        same = (human == auto).astype(float)
        raw, kappa, pm, note = _kappa_with_se(list(group["label"]), list(group["auto"]))
        rows.append({**dict(zip([*CELL, "annotator"], key)), "n": len(group),
                     "human_correct": float(human.mean()), "auto_correct": float(auto.mean()),
                     "raw_agreement_binary": float(same.mean()),
                     "raw_agreement_binary_sem": standard_error_of_mean(same),
                     "raw_agreement": raw, "cohen_kappa": kappa, "cohen_kappa_pm": pm, "note": note})
    return pd.DataFrame(rows, columns=CELL_AGREEMENT_COLUMNS)


def annotation_tables(handle, gen: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """`annotation_vs_auto` (per annotator: heuristic vs human, on the labels and on the paper's binary mapping),
    `annotation_vs_auto_cells` (the same per model x dataset x pronoun x context cell, `cell_agreement`),
    `annotation_labels` (the label breakdown per cell, `label_breakdown`) and `annotator_agreement` (every pair of
    annotators on their shared samples); each agreement with its +- term. Empty when nothing is annotated."""
    if "sample_id" not in gen.columns:  # an engine without sha256 (DataFusion) has no sample ids to join on
        return {}
    ann = handle.fetch(handle.table("annotations").order_by(["annotator", "sample_id"]))
    if ann.empty:
        return {}
    merged = ann.merge(gen[["sample_id", *CELL, "outcome"]], on="sample_id", how="inner")
    merged = merged.assign(auto=merged["outcome"].map(AUTO_TO_LABEL))
    vs_auto = []
    for annotator, group in merged.groupby("annotator", sort=True):
        raw, kappa, pm, note = _kappa_with_se(list(group["label"]), list(group["auto"]))
        human = group["label"].map(LABEL_CORRECT).to_numpy()
        auto = (group["outcome"] != "misgendered").astype(int).to_numpy()
        raw_bin, kappa_bin, pm_bin, note_bin = _kappa_with_se(list(human), list(auto))
        vs_auto.append({"annotator": annotator, "n": len(group), "raw_agreement": raw, "cohen_kappa": kappa,
                        "cohen_kappa_pm": pm, "raw_agreement_binary": raw_bin,
                        "raw_agreement_binary_sem": standard_error_of_mean(human == auto),
                        "cohen_kappa_binary": kappa_bin, "cohen_kappa_binary_pm": pm_bin,
                        "extraneous_gendered_rate": float(group["extraneous_gendered"].mean()),
                        "note": "; ".join(x for x in (note, note_bin) if x)})
    pairs = []
    by_annotator = {a: g.set_index("sample_id")["label"] for a, g in ann.groupby("annotator", sort=True)}
    for first, second in itertools.combinations(sorted(by_annotator), 2):
        shared = by_annotator[first].index.intersection(by_annotator[second].index)
        a, b = list(by_annotator[first][shared]), list(by_annotator[second][shared])
        raw, kappa, pm, note = _kappa_with_se(a, b)
        pairs.append({"annotator_1": first, "annotator_2": second, "n": len(shared), "raw_agreement": raw,
                      "raw_agreement_sem": standard_error_of_mean(np.array(a) == np.array(b)),
                      "cohen_kappa": kappa, "cohen_kappa_pm": pm, "note": note})
    out = {"annotation_vs_auto": pd.DataFrame(vs_auto), "annotation_vs_auto_cells": cell_agreement(merged),
           "annotation_labels": label_breakdown(merged)}
    if pairs:
        out["annotator_agreement"] = pd.DataFrame(pairs)
    return out
