"""Human annotation of generated continuations (misgendering meta-evaluation, Subramonian et al. 2025): export a
sheet to label, import labels into the `annotations` table, and agreement of the automatic first-pronoun heuristic
with humans and between annotators.

Labels: correct | misgendering | no_pronoun (the heuristic's outcomes correct | misgendered | no_pronoun), plus
`extraneous_gendered` (true / false): gendered language about the referent other than pronouns.

Agreement on labels with k classes: raw agreement p_o and Cohen's kappa (p_o - p_e) / (1 - p_e), p_e = sum_c
p_1(c) p_2(c) from the two raters' marginals; NaN (with a note) when 1 - p_e = 0 (both raters constant and equal).
"""

from __future__ import annotations

import csv
import itertools
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from ..loaders.errors import DataError
from ..loaders.readers import read_table
from ..warehouse import Warehouse

LABELS = ("correct", "misgendering", "no_pronoun")
#: heuristic outcome -> human label vocabulary
AUTO_TO_LABEL = {"correct": "correct", "misgendered": "misgendering", "no_pronoun": "no_pronoun"}
COLUMNS = ("sample_id", "label", "extraneous_gendered", "annotator")
_TRUE, _FALSE = {"true", "1", "yes", "y", "t"}, {"false", "0", "no", "n", "f"}


def nominal_agreement(a, b) -> tuple[int, float, float, str]:
    """(n, raw agreement, Cohen's kappa, note) of two label sequences of equal length (any hashable labels)."""
    a, b = list(a), list(b)
    if len(a) != len(b):
        raise ValueError(f"label sequences differ in length ({len(a)} vs {len(b)})")
    n = len(a)
    if n == 0:
        return 0, np.nan, np.nan, "no shared samples"
    p_o = sum(x == y for x, y in zip(a, b)) / n
    labels = set(a) | set(b)
    p_e = sum((a.count(c) / n) * (b.count(c) / n) for c in labels)
    if 1 - p_e <= 1e-15:
        return n, p_o, np.nan, "both raters use one and the same label: kappa undefined"
    return n, p_o, (p_o - p_e) / (1 - p_e), ""


def export_sheet(wh: Warehouse, out: Path, n: int, seed: int = 0, dataset: str | None = None) -> int:
    """Write a CSV of `n` randomly chosen continuations to label (the heuristic's outcome is NOT shown)."""
    where = "WHERE dataset = ?" if dataset else ""
    frame = wh.con.execute(
        f"SELECT sample_id, dataset, declared, context, prompt_text, text FROM gen_samples {where} "
        f"ORDER BY sample_id", [dataset] if dataset else []).df()
    if frame.empty:
        raise ValueError(f"{wh.path}: no generated samples{' for ' + dataset if dataset else ''} to annotate")
    chosen = frame.sample(n=min(n, len(frame)), random_state=seed).sort_values("sample_id")
    chosen = chosen.assign(label="", extraneous_gendered="", annotator="")
    chosen.to_csv(out, index=False, quoting=csv.QUOTE_NONNUMERIC)
    return len(chosen)


def read_annotations(path: Path, known: set[str]) -> list[dict]:
    """Validated rows of an annotation CSV; any bad row raises DataError naming file, line and field."""
    rows = []
    seen: dict[tuple[str, str], int] = {}
    for rec in read_table(path, COLUMNS, allow_extra_cells=False):
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
                     "extraneous_gendered": flag in _TRUE, "line": rec.line})
    return rows


def import_annotations(wh: Warehouse, path: Path) -> tuple[int, int]:
    """Validate the whole file, then append it in one transaction. Returns (rows read, rows added).

    Re-importing identical rows adds nothing; a row that would change a stored label (same sample and annotator)
    is an error naming its line, and nothing is written."""
    known = {r[0] for r in wh.con.execute("SELECT sample_id FROM gen_samples").fetchall()}
    rows = read_annotations(Path(path), known)
    if not rows:
        raise DataError(Path(path), "no annotation rows")
    stored = {(sid, who): (label, flag) for sid, who, label, flag in wh.con.execute(
        "SELECT sample_id, annotator, label, extraneous_gendered FROM annotations").fetchall()}
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


def annotation_tables(wh: Warehouse, gen: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """`annotation_vs_auto` (per annotator: heuristic vs human, 3 labels and the paper's binary mapping) and
    `annotator_agreement` (every pair of annotators on their shared samples); empty when nothing is annotated."""
    ann = wh.con.execute("SELECT * FROM annotations ORDER BY annotator, sample_id").df()
    if ann.empty:
        return {}
    merged = ann.merge(gen[["sample_id", "dataset", "outcome"]], on="sample_id", how="inner")
    merged = merged.assign(auto=merged["outcome"].map(AUTO_TO_LABEL))
    vs_auto = []
    for annotator, group in merged.groupby("annotator", sort=True):
        n, raw, kappa, note = nominal_agreement(group["label"], group["auto"])
        _, raw_bin, kappa_bin, note_bin = nominal_agreement(group["label"] != "misgendering",
                                                            group["auto"] != "misgendering")
        vs_auto.append({"annotator": annotator, "n": n, "raw_agreement": raw, "cohen_kappa": kappa,
                        "raw_agreement_binary": raw_bin, "cohen_kappa_binary": kappa_bin,
                        "extraneous_gendered_rate": float(group["extraneous_gendered"].mean()),
                        "note": "; ".join(x for x in (note, note_bin) if x)})
    pairs = []
    by_annotator = {a: g.set_index("sample_id")["label"] for a, g in ann.groupby("annotator", sort=True)}
    for first, second in itertools.combinations(sorted(by_annotator), 2):
        shared = by_annotator[first].index.intersection(by_annotator[second].index)
        n, raw, kappa, note = nominal_agreement(by_annotator[first][shared], by_annotator[second][shared])
        pairs.append({"annotator_1": first, "annotator_2": second, "n": n, "raw_agreement": raw,
                      "cohen_kappa": kappa, "note": note})
    out = {"annotation_vs_auto": pd.DataFrame(vs_auto)}
    if pairs:
        out["annotator_agreement"] = pd.DataFrame(pairs)
    return out
