"""Stimuli validated and kept on disk, not in memory, until they are stored (issue 45: a file of a million rows
loads in bounded memory).

`Staged(stimuli)` takes an iterable of `Stimulus` (a file read a block at a time, `files.iter_stimuli`), calls
`check` on each (and `advance(n)` after every `n` of them: a progress bar), and writes their warehouse rows
(`Stimulus.to_row`) to a temporary Parquet file in batches of `BATCH_ROWS`, each stimulus once. It keeps only their
ids (the dataset's version hashes them, in file order), so the warehouse appends the file as it is
(`Warehouse.append_file`). A problem in any row raises before anything is written to a warehouse, and the temporary
folder goes with the object (`close`, or at exit).
"""

from __future__ import annotations

import json
import tempfile
from array import array
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import pyarrow as pa

from ...schema import SeenStimulus, Stimulus
from ...schema.evidence import SCHEMAS, arrow
from ...schema.identity import ID_LENGTH

__all__ = ["BATCH_ROWS", "Staged"]

#: stimuli converted and written at a time
BATCH_ROWS = 10_000
#: the staged rows' schema: `stimuli`'s columns and types, nullable as `evidence.arrow` makes them
SCHEMA = pa.schema([field.with_nullable(True) for field in SCHEMAS["stimuli"]])


class Staged:
    """Stimuli in a temporary Parquet file: `ids` (file order, repeats included), `len()`, `path` (each stimulus
    once, to append), `batches()` and iteration (the `Stimulus` objects again, a batch at a time).

    In memory: 8 bytes a row for its id (a 64-bit number: ids are ID_LENGTH = 16 hex digits) and, while staging,
    about 60 more for the set that writes a stimulus repeated in the file once.
    """

    def __init__(self, stimuli: Iterable[Stimulus], check: Callable[[Stimulus], None] | None = None,
                 batch_rows: int = BATCH_ROWS, advance: Callable[[int], None] | None = None,
                 kind: type[Stimulus] = SeenStimulus):
        import pyarrow.parquet as pq

        self.kind = kind  # the class iteration gives back (the stimuli's own: `SeenStimulus` keys what is seen)
        self._folder = tempfile.TemporaryDirectory(prefix="biaslab-staged-")
        self.path = Path(self._folder.name) / "stimuli.parquet"
        self._ids = array("Q")
        written: set[int] = set()
        columns = SCHEMAS["stimuli"].names
        rows: list[dict] = []
        try:
            with pq.ParquetWriter(self.path, SCHEMA) as writer:
                for stimulus in stimuli:
                    if check is not None:
                        check(stimulus)
                    row = stimulus.to_row()
                    number = int(row["stimulus_id"], 16)
                    self._ids.append(number)
                    if number not in written:  # a stimulus repeated in the file is written once
                        written.add(number)
                        rows.append(row)
                    if len(self._ids) % batch_rows == 0:
                        writer.write_table(_table(rows, columns))
                        rows = []
                        if advance is not None:
                            advance(batch_rows)
                writer.write_table(_table(rows, columns))
                if advance is not None and len(self._ids) % batch_rows:
                    advance(len(self._ids) % batch_rows)
        except BaseException:
            self.close()
            raise

    @property
    def ids(self) -> list[str]:
        """The stimulus ids in file order (a stimulus repeated in the file: each time)."""
        return [f"{number:0{ID_LENGTH}x}" for number in self._ids]

    def __len__(self) -> int:
        return len(self._ids)

    def batches(self, rows: int = BATCH_ROWS) -> Iterator[pa.Table]:
        """The `stimuli` rows, in file order, `rows` at a time."""
        import pyarrow.parquet as pq

        for batch in pq.ParquetFile(self.path).iter_batches(batch_size=rows):
            yield pa.Table.from_batches([batch])

    def __iter__(self) -> Iterator[Stimulus]:
        for table in self.batches(BATCH_ROWS):
            for row in table.to_pylist():
                row.pop("stimulus_id")
                row["attrs"] = json.loads(row["attrs"])
                yield self.kind(**{k: v for k, v in row.items() if v is not None})

    def close(self) -> None:
        """Remove the temporary file."""
        self._folder.cleanup()


def _table(rows: list[dict], columns) -> pa.Table:
    return arrow("stimuli", {c: [r.get(c) for r in rows] for c in columns})
