"""The per-collection results artifact of `biaslab metrics ... --out results.json`: one strict-JSON file with a
study's metric tables, the versions that computed them and the identities of the collections they came from."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from .. import __version__

#: version of the results file layout
RESULTS_FORMAT = 1


def _plain(value):
    """One cell as a strict-JSON value: missing and non-finite as None, numpy scalars and arrays as Python ones,
    timestamps as ISO 8601 text, floats unrounded."""
    if value is None or value is pd.NA or value is pd.NaT:
        return None
    if isinstance(value, (pd.Timestamp, datetime)):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)) or hasattr(value, "tolist") and getattr(value, "ndim", 0) > 0:
        return [_plain(v) for v in list(value)]
    if hasattr(value, "item"):  # numpy scalars
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def records(frame: pd.DataFrame) -> list[dict]:
    """A table's rows as strict-JSON-ready dicts, every float at full precision (pandas' `to_json` keeps 10 decimal
    places: 1.786e-08 would read 1.79e-08, and a p-value of 7e-102 would read 0)."""
    return [{str(k): _plain(v) for k, v in row.items()} for row in frame.to_dict(orient="records")]



def results_document(study: str, tables: dict[str, pd.DataFrame], collections: pd.DataFrame, parameters: dict, *,
                     warehouse: str, schema_version: int, versions: dict) -> dict:
    """The results document (see the module docstring).

    Parameters
    ----------
    study : e.g. 'contextuality'.
    tables : public metric tables by name.
    collections : the collections (`biaslab.warehouse.catalog.COLLECTION_COLUMNS`) the tables were computed from.
    parameters : the command's parameters.
    warehouse : the warehouse path.
    schema_version : its schema version.
    versions : library versions (`biaslab.provenance.library_versions`).

    Returns
    -------
    A JSON-ready dict.
    """
    return {
        "format": "biaslab-results", "results_format": RESULTS_FORMAT, "study": study,
        "biaslab_version": __version__, "schema_version": schema_version, "versions": versions,
        "computed_at": datetime.now(timezone.utc).isoformat(timespec="seconds"), "warehouse": warehouse,
        "parameters": parameters, "collections": records(collections),
        "tables": {name: records(frame) for name, frame in tables.items()},
    }


def write_results(handle, study: str, tables: dict[str, pd.DataFrame], datasets: Iterable[str], parameters: dict,
                  out: Path) -> Path:
    """Write the results file for `study` computed on a `biaslab.open` handle from the collections of `datasets`
    whose model appears in the tables. Returns `out`."""
    from ..warehouse.provenance import library_versions

    keys = set().union(*(set(f["model_key"]) for f in tables.values() if "model_key" in f.columns)) if tables else set()
    found = handle.collections()
    found = found[found["dataset"].isin(list(datasets)) & found["model_key"].isin(keys)]
    document = results_document(study, tables, found, parameters, warehouse=str(handle.path),
                                schema_version=handle.schema_version(), versions=library_versions())
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(document, indent=1, allow_nan=False) + "\n", encoding="utf-8")
    return out
