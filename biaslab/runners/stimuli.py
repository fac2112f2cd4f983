"""The stimuli of one collection: the dataset's, loaded from the data directory into `stimuli` (idempotent) or, without
the files, read back from the warehouse; in one canonical order; limited and sharded."""

from __future__ import annotations

import json
from pathlib import Path

from .. import errors, loaders
from . import sampling
from ..loaders.errors import DataError
from ..schema import Stimulus, stimulus_type


def shard_of(stimulus_id: str, count: int) -> int:
    """Shard of a stimulus: its content hash modulo the shard count (stable across machines and runs)."""
    return int(stimulus_id, 16) % count


def shard_stimuli(stimuli: list[Stimulus], index: int, count: int) -> list[Stimulus]:
    return [s for s in stimuli if shard_of(s.stimulus_id, count) == index]


def stimuli_from_warehouse(wh, dataset: str, ids: list[str] | None = None,
                           kind: type[Stimulus] = Stimulus) -> list[Stimulus]:
    """Rebuild `Stimulus` objects (of class `kind`: a user dataset's, `schema.stimulus_type`) from stored rows (same
    content, hence the same stimulus_id), in canonical order; with `ids`, only those stimuli (a user dataset's
    current version)."""
    names = wh.columns("stimuli")
    out = []
    if ids is None:
        rows = wh.rows("SELECT * FROM stimuli WHERE dataset = ? ORDER BY item_id, stimulus_id", [dataset])
    else:
        rows = wh.rows("SELECT s.* FROM stimuli s SEMI JOIN (SELECT unnest(?::VARCHAR[]) AS stimulus_id) w "
                       "USING (stimulus_id) WHERE s.dataset = ? ORDER BY s.item_id, s.stimulus_id", [ids, dataset])
    for row in rows:
        record = dict(zip(names, row))
        sid = record.pop("stimulus_id")
        record["attrs"] = json.loads(record["attrs"]) if record["attrs"] else {}
        record = {k: v for k, v in record.items() if v is not None}
        stimulus = kind.model_validate(record)
        if stimulus.stimulus_id != sid:
            raise DataError(wh.path, f"stored stimulus {sid} does not round-trip (got {stimulus.stimulus_id})",
                            field="stimulus_id")
        out.append(stimulus)
    return out


def dataset_stimuli(wh, config, store: bool = True) -> tuple[list[Stimulus], list[str]]:
    """The dataset's own stimuli and the notes of loading them (modified files accepted).

    From the data directory when its folder is there (loaded into `stimuli`, idempotent; not with `store` False,
    a survey that writes nothing), else the stored rows;
    either way in one canonical order (item_id, then stimulus_id), so `--limit N` and chunk boundaries select the
    same stimuli whichever source was used. Stimuli derived by a protocol (TANGO's templates, which name the prompt
    they were built from in `attrs.template_of`) are not the dataset's own and are left out.
    """
    ref = config.dataset_ref()
    if ref.user:
        return user_stimuli(wh, config, ref, store), []
    info = ref.info
    root = loaders.default_data_dir(config.data_dir)
    if info.path(root).is_dir():
        loaded = info.load_verified(root, accept_modified=config.accept_modified, **config.loader_options)
        rows = [s.to_row() for s in loaded.stimuli]  # each id hashed once (HolisticBias: 549,120 of them)
        if store:
            wh.append("stimuli", rows)
        order = sorted(range(len(rows)), key=lambda i: (rows[i]["item_id"], rows[i]["stimulus_id"]))
        stimuli, notes = [loaded.stimuli[i] for i in order], loaded.notes()
    else:
        stimuli, notes = stimuli_from_warehouse(wh, info.name), []
        if not stimuli:
            raise DataError(info.path(root), f"dataset {config.dataset} is neither in the data directory nor in "
                                             f"{wh.path} (set --data-dir or BIASLAB_DATA)")
    return [s for s in stimuli if "template_of" not in s.attrs], notes


def user_stimuli(wh, config, ref, store: bool = True) -> list[Stimulus]:
    """A user dataset's current version, read from --db (where `biaslab data load` put it); when this collection
    writes a shard file, the stimuli and the dataset's version are copied into it (merging brings them back)."""
    ids = list(ref.stored.stimulus_ids)
    kind = stimulus_type(ref.stored.declaration.identity)
    if Path(config.database()).resolve() == Path(config.db).resolve():
        stimuli = stimuli_from_warehouse(wh, ref.name, ids, kind)
    else:
        from ..warehouse import Warehouse
        from ..warehouse.user_datasets import copy

        with Warehouse.open(config.db, read_only=True) as main:
            stimuli = stimuli_from_warehouse(main, ref.name, ids, kind)
        if store:
            copy(wh, ref.stored, stimuli)
    if len(stimuli) != len(set(ids)):
        raise DataError(config.db, f"dataset {ref.name}: {len(set(ids)) - len(stimuli)} of its stimuli are missing "
                                   f"from the stimuli table (load it again with biaslab data load)")
    return stimuli


def check_where(where: dict[str, str]) -> None:
    """`--where FIELD=VALUE`: FIELD a stimulus field or `attrs.NAME`; UsageError naming the fields otherwise."""
    fields = [f for f in Stimulus.model_fields if f != "attrs"]
    for field in where:
        if field not in fields and not (field.startswith("attrs.") and len(field) > len("attrs.")):
            raise errors.UsageError(f"--where {field}=...: no stimulus field {field!r} (fields: {', '.join(fields)}; "
                                    f"or attrs.NAME for an attribute)")


def _value(stimulus: Stimulus, field: str) -> str:
    value = stimulus.attrs.get(field[len("attrs."):]) if field.startswith("attrs.") else getattr(stimulus, field)
    if value is None:
        return ""
    if isinstance(value, tuple | list):
        return "|".join(map(str, value))
    return str(value)


def matches(stimulus: Stimulus, where: dict[str, str]) -> bool:
    """Whether `stimulus` has, for every FIELD=VALUE of `where`, one of the values (`|` separates alternatives;
    a list field such as `options` compares as its values joined by `|`, an absent value as the empty string)."""
    for field, wanted in where.items():
        value = _value(stimulus, field)
        if value != wanted and value not in wanted.split("|"):
            return False
    return True


def select(stimuli: list[Stimulus], config) -> list[Stimulus]:
    """`--where` (stimuli whose fields have the given values), then `--limit` (the first N items, whole, in the
    order `--limit-order` names: a seeded stratified sample by default, `runners.sampling`), then `--shard i/n`;
    refused in one line when nothing is left."""
    if config.where:
        stimuli = [s for s in stimuli if matches(s, config.where)]
        if not stimuli:
            raise errors.DataError(f"dataset {config.dataset}: no stimulus has "
                                   f"{' and '.join(f'{k}={v}' for k, v in config.where.items())} (--where)")
    if config.limit is not None:
        ref = config.dataset_ref()
        strata, unit = ref.strata, ref.sample_item
        stimuli = sampling.limited(stimuli, config.limit, item=lambda s: _value(s, unit),
                                   strata=lambda s: tuple(_value(s, f) for f in strata),
                                   order=config.limit_order, seed=config.limit_seed)
    if not stimuli:
        raise errors.DataError(f"dataset {config.dataset}: no stimuli to collect")
    if config.shard is not None:
        stimuli = shard_stimuli(stimuli, *config.shard_position())
    return stimuli
