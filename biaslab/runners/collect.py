"""`runners collect`: dataset -> stimuli -> pending requests -> model -> warehouse, resumable and idempotent.

Order of work: validate every argument and find the stimuli before loading any model; register the model and the
run; skip requests already stored for this model; write chunk by chunk; mark the run finished (or failed /
interrupted).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import loaders
from ..loaders.errors import DataError
from ..schema import Stimulus
from ..warehouse import Warehouse
from .loading import model_row, prepare_model
from .requests import score_requests
from .score_collect import collect_scores, pending_requests

#: protocols each dataset supports; the first is the default.
SCORING_DATASETS = ("negation-examples", "negation", "misgendered", "ruff", "winobias", "gece-winobias",
                    "gece-winogender", "winogender", "genderlex", "genderlex-person", "genderlex-someone", "winoqueer")
PLL_SCHEMES = ("original", "within_word_l2r")


def protocols_for(dataset: str) -> tuple[str, ...]:
    if dataset in SCORING_DATASETS:
        return ("prob",)
    return ()


@dataclass
class CollectConfig:
    dataset: str
    protocol: str | None = None
    model: str = "smollm2-135m"
    dtype: str | None = None
    quant: str = "none"
    device: str | None = None
    db: str = "warehouse/biaslab.duckdb"
    data_dir: str | None = None
    limit: int | None = None
    pll: str = "original"
    max_tokens: int = 4096
    chunk_size: int = 256
    loader_options: dict[str, Any] = field(default_factory=dict)

    def validate(self) -> None:
        """Refuse absurd parameters before any model is loaded."""
        loaders.get(self.dataset)  # unknown dataset -> ValueError naming the known ones
        supported = protocols_for(self.dataset)
        if not supported:
            raise ValueError(f"dataset {self.dataset}: no runner protocol is available for it yet")
        self.protocol = self.protocol or supported[0]
        if self.protocol not in supported:
            raise ValueError(f"--protocol {self.protocol} is not available for {self.dataset}; use one of {supported}")
        if self.pll not in PLL_SCHEMES:
            raise ValueError(f"--pll must be one of {PLL_SCHEMES}, got {self.pll!r}")
        if self.limit is not None and self.limit < 1:
            raise ValueError(f"--limit must be at least 1, got {self.limit}")
        if self.max_tokens < 8 or self.chunk_size < 1:
            raise ValueError("--batch-tokens must be at least 8 and --chunk-size at least 1")


def stimuli_from_warehouse(wh: Warehouse, dataset: str) -> list[Stimulus]:
    """Rebuild `Stimulus` objects from stored rows (same content, hence the same stimulus_id)."""
    cursor = wh.con.execute("SELECT * FROM stimuli WHERE dataset = ? ORDER BY item_id, stimulus_id", [dataset])
    columns = [d[0] for d in cursor.description]
    out = []
    for row in cursor.fetchall():
        record = dict(zip(columns, row))
        sid = record.pop("stimulus_id")
        record["attrs"] = json.loads(record["attrs"]) if record["attrs"] else {}
        record = {k: v for k, v in record.items() if v is not None}
        stimulus = Stimulus.model_validate(record)
        if stimulus.stimulus_id != sid:
            raise DataError(wh.path, f"stored stimulus {sid} does not round-trip (got {stimulus.stimulus_id})",
                            field="stimulus_id")
        out.append(stimulus)
    return out


def dataset_stimuli(wh: Warehouse, config: CollectConfig) -> list[Stimulus]:
    """Load the dataset from the data directory into `stimuli` (idempotent); without the files, use stored rows."""
    info = loaders.get(config.dataset)
    root = loaders.default_data_dir(config.data_dir)
    if info.path(root).is_dir():
        stimuli = info.load(root, **config.loader_options)
        wh.append("stimuli", [s.to_row() for s in stimuli])
        return stimuli
    stored = stimuli_from_warehouse(wh, info.name)
    if not stored:
        raise DataError(info.path(root), f"dataset {config.dataset} is neither in the data directory nor in "
                                         f"{wh.path} (set --data-dir or BIASLAB_DATA)")
    return stored


@dataclass
class CollectResult:
    run_id: str
    model_key: str
    stimuli: int
    requests: int
    pending: int
    added: int


def collect(config: CollectConfig, *, progress: Callable[[int, int], Callable[[int], None]] | None = None,
            loaded=None) -> CollectResult:
    """Run one collection. `progress(total, done)` returns a callback advanced by the items just written.

    `loaded` (a LoadedModel) skips model loading, for tests and benchmarks that reuse one model.
    The weights are loaded only when some request is pending.
    """
    config.validate()
    db_path = Path(config.db)
    with Warehouse.open(db_path) as wh:
        stimuli = dataset_stimuli(wh, config)
        if config.limit is not None:
            stimuli = stimuli[: config.limit]
        prepared = loaded if loaded is not None else prepare_model(
            config.model, dtype=config.dtype, quant=config.quant, device=config.device)
        scheme = config.pll if prepared.spec.kind == "masked" else "causal"
        requests = score_requests(stimuli, config.protocol, scheme)
        wh.append("models", [model_row(prepared.spec)])
        todo = pending_requests(wh, prepared.model_key, requests)
        if todo and loaded is None:
            loaded = prepared.load()
        params = {k: v for k, v in vars(config).items() if k not in ("db",)}
        run_id = wh.start_run(f"runners collect --dataset {config.dataset}", {**params, "scheme": scheme},
                              device=str(prepared.device), model_key=prepared.model_key)
        advance = progress(len(requests), len(requests) - len(todo)) if progress else None
        status, added = "failed", 0
        try:
            added = collect_scores(wh, loaded, todo, chunk_size=config.chunk_size, max_tokens=config.max_tokens,
                                   run_id=run_id, on_progress=advance)
            status = "finished"
        except KeyboardInterrupt:
            status = "interrupted"
            raise
        finally:
            wh.finish_run(run_id, status=status, rows_added=added)
        return CollectResult(run_id, prepared.model_key, len(stimuli), len(requests), len(todo), added)
