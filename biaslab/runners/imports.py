"""`biaslab import`: answers and scores that another tool computed, stored as evidence of their own kind (issue 70,
item 2), so biaslab's statistics (intervals over templates and pairs, coverage, paired tests between models) apply to
runs made elsewhere without running a model again.

Formats (`FORMATS`; detected from the file when not given):

- ``lm-eval``: lm-evaluation-harness's ``--log_samples`` files (``samples_<task>_<date>.jsonl``, or the folder lm-eval
  wrote) of its BBQ task (``bbq``: multiple choice over the two named answers and HELM's ten phrasings of "unknown";
  the answer is the highest log-likelihood, as lm-eval's ``acc`` takes it, and every "unknown" phrasing is BBQ's
  unknown answer) and its CrowS-Pairs tasks (``crows_pairs_english*``: each sentence's log-likelihood). The tool's
  version and the model come from the ``results_*.json`` lm-eval writes beside the samples (or ``--model``).
- ``inspect``: inspect_ai eval logs (``.eval`` archives or ``.json``) of inspect_evals' BBQ task: the letter the
  ``choice`` scorer read from each answer. One epoch per sample.
- ``bbq-results``: BBQ's own results files (JSONL rows of the dataset with one column per model's free-text
  prediction, as the authors' UnifiedQA predictions in the data folder): each column ``*pred*`` (or ``--column``) a
  model, its text mapped to an answer as the authors' R script maps it (`loaders.bbq.label_text_prediction`; an
  answer it cannot map is kept as no answer, counted invalid).
- ``csv``: a plain CSV. BBQ: ``example_id`` (biaslab's item id ``Category.N``, or a ``category`` column beside the
  number) and ``answer`` (0-2, A-C, or the answer's text). CrowS-Pairs: ``pair_id``, ``score_more`` and
  ``score_less`` (each sentence's log-likelihood), with ``--dataset crows-pairs`` or ``crows-pairs-revised``.

Every row names one stimulus of the built-in dataset (BBQ's example, CrowS-Pairs' sentence), checked against it: an id
that matches no stimulus, or answer texts that differ from the dataset's, is refused. The model record is keyed by
(tool, version, task, model) with the tool as its backend, so an import is never mixed with biaslab's own collections
and a second import of the same file adds nothing. The dataset's stimuli are stored too (the whole dataset: coverage
then says how much of it the other tool scored). Bad input (a truncated line, an unknown task, an unknown id, a file
of another task): one line naming file and line; nothing is stored.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import zipfile
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .. import loaders
from ..errors import UsageError
from ..loaders.bbq import label_text_prediction
from ..loaders.errors import DataError
from ..loaders.readers import read_text
from ..schema import Stimulus
from ..schema.identity import content_hash
from ..warehouse import Rollback, Warehouse

PathLike = str | os.PathLike

FORMATS = ("lm-eval", "inspect", "bbq-results", "csv")
#: the datasets an import can name, by study
BBQ, CROWS = "bbq", ("crows-pairs-revised", "crows-pairs")
LETTERS = "ABC"

__all__ = ["FORMATS", "ImportResult", "import_answers"]


@dataclass
class Answer:
    """One answer the tool gave: a BBQ example's chosen option (with each option's log-likelihood where the tool
    has them), or one CrowS-Pairs sentence's log-likelihood."""

    line: int
    item: str                      # the dataset's item id (BBQ: Category.N; CrowS-Pairs: the pair id)
    sentence: str | None = None    # CrowS-Pairs: 'more' / 'less'
    text: str | None = None        # CrowS-Pairs: the sentence as the tool scored it (checked)
    options: tuple[str, ...] | None = None  # BBQ: ans0-2 as the tool had them (checked)
    chosen: int | None = None      # BBQ: the option index answered; None: none the tool could read
    logliks: dict[int, float] = field(default_factory=dict)  # BBQ: option index -> log-likelihood
    loglik: float | None = None    # CrowS-Pairs: the sentence's log-likelihood
    answer_text: str | None = None


@dataclass
class Read:
    """What one file (or one prediction column) holds: the tool, its version, the task and the model, and the
    answers."""

    path: str
    tool: str
    version: str | None
    task: str
    model: str
    study: str                     # "bbq" or "crows"
    answers: list[Answer]
    dataset: str | None = None     # CrowS-Pairs: which of the two sets (found by matching, or --dataset)
    dtype: str = "unknown"


@dataclass(frozen=True)
class ImportResult:
    """What an import did: one entry per model imported (name, model_key, dataset, answers read, rows added)."""

    db: str
    imported: tuple[dict[str, Any], ...]


# ------------------------------------------------------------------------------------------------------ reading files

def _jsonl(path: Path) -> list[tuple[int, dict]]:
    """(line number, object) of every non-empty line; a line that is not a JSON object is refused."""
    rows = []
    lines = read_text(path).splitlines()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            end = " (the file ends mid-line: truncated?)" if number == len(lines) else ""
            raise DataError(path, f"not valid JSON: {exc.msg}{end}", line=number) from None
        if not isinstance(value, dict):
            raise DataError(path, "not a JSON object", line=number)
        rows.append((number, value))
    if not rows:
        raise DataError(path, "holds no rows")
    return rows


def _need(path: Path, line: int, record: dict, key: str, kind: type | tuple = str) -> Any:
    if key not in record:
        raise DataError(path, "missing", line=line, field=key)
    value = record[key]
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise DataError(path, f"expected {getattr(kind, '__name__', kind)}, got {type(value).__name__}", line=line,
                        field=key)
    return value


def _bbq_item(path: Path, line: int, category: Any, example: Any) -> str:
    if not isinstance(category, str) or not category:
        raise DataError(path, "a BBQ category (e.g. Age) is needed", line=line, field="category")
    try:
        number = int(example)
    except (TypeError, ValueError):
        raise DataError(path, f"not an example number: {example!r}", line=line, field="example_id") from None
    return f"{category}.{number}"


# lm-evaluation-harness ------------------------------------------------------------------------------------------

_SAMPLES = re.compile(r"^samples_(?P<task>.+?)(_(?P<date>\d{4}-\d{2}-\d{2}T[\d\-.:]+))?\.jsonl(\.gz)?$")


def _lm_eval_task(path: Path) -> str:
    m = _SAMPLES.match(path.name)
    if m is None:
        raise DataError(path, "not an lm-eval samples file (samples_<task>_<date>.jsonl, from --log_samples)")
    return m.group("task")


def _lm_eval_results(path: Path, task: str) -> dict:
    """The results_*.json lm-eval wrote beside `path` that reports `task` ({} when there is none)."""
    for candidate in sorted(path.parent.glob("results_*.json"), reverse=True):
        try:
            data = json.loads(candidate.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError, UnicodeDecodeError):
            continue
        if isinstance(data, dict) and task in (data.get("results") or {}):
            return data
    return {}


def _lm_eval_model(results: dict) -> tuple[str | None, str]:
    """(model name, dtype) from lm-eval's results: model_args' pretrained (its folder's name) or model_name."""
    config = results.get("config") or {}
    args = config.get("model_args") or ""
    parsed = dict(p.split("=", 1) for p in args.split(",") if "=" in p) if isinstance(args, str) else dict(args)
    name = parsed.get("pretrained") or results.get("model_name")
    dtype = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "float64": "fp64"}.get(
        str(parsed.get("dtype", "")), "unknown")
    return (Path(str(name)).name if name else None), dtype


def read_lm_eval(path: Path) -> Read:
    """One lm-eval samples file (see the module docstring)."""
    task = _lm_eval_task(path)
    rows = _jsonl(path)
    results = _lm_eval_results(path, task)
    model, dtype = _lm_eval_model(results)
    version = results.get("lm_eval_version") or (results.get("versions") or {}).get("lm_eval")
    first_line, first = rows[0]
    doc = first.get("doc")
    if not isinstance(doc, dict):
        raise DataError(path, "no `doc`: not an lm-eval samples file", line=first_line, field="doc")
    if {"sent_more", "sent_less"} <= set(doc):
        study = "crows"
    elif {"example_id", "category", "ans0", "ans1", "ans2"} <= set(doc):
        study = "bbq"
    else:
        raise DataError(path, f"task {task!r} is not one biaslab imports (its docs have neither BBQ's example_id, "
                              f"category and ans0-2 nor CrowS-Pairs' sent_more and sent_less)", line=first_line,
                        field="doc")
    answers = []
    for line, sample in rows:
        doc = _need(path, line, sample, "doc", dict)
        resps = _need(path, line, sample, "filtered_resps", list)
        try:
            lls = [float(r[0]) for r in resps if not isinstance(r, str)]
        except (TypeError, ValueError, IndexError):
            lls = []
        if len(lls) != len(resps) or not lls:
            raise DataError(path, f"task {task!r}: expected [log-likelihood, is_greedy] per choice (lm-eval's "
                                  f"multiple-choice tasks; generated answers are not imported)", line=line,
                            field="filtered_resps")
        choices = _lm_eval_choices(path, line, sample, len(lls))
        if study == "crows":
            more, less = (_need(path, line, doc, k) for k in ("sent_more", "sent_less"))
            if len(lls) != 2:
                raise DataError(path, f"expected 2 choices (sent_more, sent_less), got {len(lls)}: a file of "
                                      f"another task?", line=line, field="filtered_resps")
            answers += [Answer(line, "", sentence="more", text=more, loglik=lls[0]),
                        Answer(line, "", sentence="less", text=less, loglik=lls[1])]
        else:
            options = tuple(_need(path, line, doc, f"ans{k}") for k in range(3))
            item = _bbq_item(path, line, doc.get("category"), doc.get("example_id"))
            answers.append(_lm_eval_bbq(path, line, item, options, choices, lls))
    return Read(str(path), "lm-eval", version, task, model or "", study, answers, dtype=dtype)


def _lm_eval_choices(path: Path, line: int, sample: dict, n: int) -> list[str]:
    """The continuation of each choice, from `arguments` (lm-eval 0.4: gen_args_i -> arg_1), without the target
    delimiter's leading space."""
    arguments = sample.get("arguments")
    if isinstance(arguments, dict):
        values = [arguments[k] for k in sorted(arguments, key=lambda k: int(re.sub(r"\D", "", k) or 0))]
        conts = [v.get("arg_1") if isinstance(v, dict) else None for v in values]
    elif isinstance(arguments, list):
        conts = [a[1] if isinstance(a, list) and len(a) > 1 else None for a in arguments]
    else:
        conts = []
    if len(conts) != n or not all(isinstance(c, str) for c in conts):
        raise DataError(path, f"expected {n} choices with their continuations", line=line, field="arguments")
    return [c[1:] if c.startswith(" ") else c for c in conts]


def _lm_eval_bbq(path: Path, line: int, item: str, options: tuple[str, ...], choices: list[str],
                 lls: list[float]) -> Answer:
    """lm-eval's BBQ multiple choice: its choices are the two named answers (ans0-2 in order without the unknown
    one), then HELM's phrasings of "unknown". The option no named choice is, is BBQ's unknown answer; every choice
    after the named ones is that option. The answer is the first highest log-likelihood (numpy's argmax, as lm-eval's
    `acc`); an option's stored log-likelihood is that of its own text (the unknown option's where its phrasing is
    among the choices)."""
    named = [k for k in range(3) if options[k] in choices[:2]]
    if len(named) != 2 or len(choices) < 3:
        raise DataError(path, f"the choices {choices[:3]}... are not lm-eval's BBQ multiple choice over the answers "
                              f"{list(options)}: a file of another task or version?", line=line, field="arguments")
    unknown = next(k for k in range(3) if k not in named)
    mapped = [options.index(c) if j < 2 else unknown for j, c in enumerate(choices)]
    best = max(range(len(lls)), key=lambda j: (lls[j], -j))
    logliks = {options.index(choices[j]): lls[j] for j in range(2)}
    own = [j for j in range(2, len(choices)) if choices[j] == options[unknown]]
    if own:
        logliks[unknown] = lls[own[0]]
    return Answer(line, item, options=options, chosen=mapped[best], logliks=logliks, answer_text=choices[best])


# inspect_ai --------------------------------------------------------------------------------------------------------

def read_inspect(path: Path) -> Read:
    """An inspect_ai eval log of inspect_evals' BBQ (a .eval archive or a .json log)."""
    header, samples = _inspect_log(path)
    evaluation = header.get("eval") if isinstance(header.get("eval"), dict) else {}
    task = str(evaluation.get("task") or "")
    model = str(evaluation.get("model") or "")
    packages = evaluation.get("packages") if isinstance(evaluation.get("packages"), dict) else {}
    version = packages.get("inspect_ai")
    if packages.get("inspect_evals"):
        version = f"{version or '?'} (inspect_evals {packages['inspect_evals']})"
    answers = []
    for number, sample in samples:
        if not isinstance(sample, dict):
            raise DataError(path, "not a sample object", line=number)
        if int(sample.get("epoch", 1) or 1) > 1:
            raise DataError(path, "a second epoch: import a log of one epoch per sample", line=number, field="epoch")
        meta = sample.get("metadata") if isinstance(sample.get("metadata"), dict) else {}
        if "category" not in meta or "source_id" not in meta:
            raise DataError(path, f"task {task or '?'!r}: samples without BBQ's category and source_id metadata "
                                  f"(inspect_evals' bbq task writes them): not a BBQ log", line=number,
                            field="metadata")
        item = _bbq_item(path, number, meta["category"], meta["source_id"])
        choices = sample.get("choices")
        if not (isinstance(choices, list) and len(choices) == 3 and all(isinstance(c, str) for c in choices)):
            raise DataError(path, "expected the three answers", line=number, field="choices")
        scores = sample.get("scores") if isinstance(sample.get("scores"), dict) else {}
        score = scores.get("choice") if isinstance(scores.get("choice"), dict) else None
        if score is None:
            raise DataError(path, "no `choice` score (inspect_evals' bbq scorer)", line=number, field="scores")
        letter = str(score.get("answer") or "").strip().upper()
        chosen = LETTERS.index(letter) if len(letter) == 1 and letter in LETTERS else None
        answers.append(Answer(number, item, options=tuple(choices), chosen=chosen, answer_text=letter or None))
    if not answers:
        raise DataError(path, "holds no samples")
    return Read(str(path), "inspect", version, task.split("/")[-1] or "bbq", model, "bbq", answers)


def _inspect_log(path: Path) -> tuple[dict, list[tuple[int, Any]]]:
    """(header, [(sample number, sample)]) of a .eval archive (header.json and samples/*.json; zstd-compressed
    members, as inspect_ai writes them since 2025, read with `zstandard`) or a .json log (gzip allowed)."""
    if zipfile.is_zipfile(path):
        try:
            with zipfile.ZipFile(path) as archive:
                names = archive.namelist()
                head = "header.json" if "header.json" in names else "_journal/start.json"
                header = json.loads(_member(archive, path, head))
                wanted = sorted((n for n in names if n.startswith("samples/") and n.endswith(".json")),
                                key=_sample_order)
                samples = [(k, json.loads(_member(archive, path, n))) for k, n in enumerate(wanted, 1)]
        except (KeyError, zipfile.BadZipFile, json.JSONDecodeError, UnicodeDecodeError, NotImplementedError,
                ValueError) as exc:
            raise DataError(path, f"not a readable inspect_ai .eval log ({exc})") from None
        return (header if isinstance(header, dict) else {}), samples
    try:
        data = json.loads(read_text(path))
    except json.JSONDecodeError as exc:
        raise DataError(path, f"not valid JSON: {exc.msg} (truncated?)", line=exc.lineno) from None
    if not isinstance(data, dict) or not isinstance(data.get("samples"), list):
        raise DataError(path, "not an inspect_ai log with samples (a .json log written with its samples)")
    return data, list(enumerate(data["samples"], 1))


#: a zip member's compression method: zstd (inspect_ai's .eval logs; Python's zipfile reads it from 3.14 only)
ZSTD = 93


def _member(archive: zipfile.ZipFile, path: Path, name: str) -> bytes:
    """One member's bytes; a zstd-compressed member is read raw from its local header and decompressed."""
    info = archive.getinfo(name)
    if info.compress_type != ZSTD:
        return archive.read(name)
    import struct

    import zstandard

    with open(path, "rb") as f:
        f.seek(info.header_offset)
        local = f.read(30)
        if local[:4] != b"PK\x03\x04":
            raise zipfile.BadZipFile(f"member {name}: no local header")
        skip = sum(struct.unpack("<HH", local[26:30]))
        f.seek(info.header_offset + 30 + skip)
        raw = f.read(info.compress_size)
    try:
        return zstandard.ZstdDecompressor().decompress(raw, max_output_size=info.file_size)
    except zstandard.ZstdError as exc:
        raise zipfile.BadZipFile(f"member {name}: {exc}") from None


def _sample_order(name: str) -> tuple:
    stem = name.rsplit("/", 1)[-1][: -len(".json")]
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", stem))


# BBQ's results files --------------------------------------------------------------------------------------------

def read_bbq_results(path: Path, column: str | None = None) -> list[Read]:
    """BBQ's results JSONL: one Read per prediction column (`column`, or every column whose name holds 'pred')."""
    rows = _jsonl(path)
    first_line, first = rows[0]
    columns = [column] if column else [k for k in first if "pred" in k.lower()]
    if not columns:
        raise DataError(path, "no prediction column (a column whose name holds 'pred'; or give --column)",
                        line=first_line)
    examples = []  # (line, row, item, options, answer_info texts): each row checked once, whatever the columns
    for line, row in rows:
        item = _bbq_item(path, line, row.get("category"), row.get("example_id"))
        options = tuple(_need(path, line, row, f"ans{k}") for k in range(3))
        info = _need(path, line, row, "answer_info", dict)
        try:
            texts = [info[f"ans{k}"][0] for k in range(3)]
        except (KeyError, IndexError, TypeError):
            raise DataError(path, "expected ans0-2, each [text, group]", line=line, field="answer_info") from None
        examples.append((line, row, item, options, texts))
    reads = []
    for name in columns:
        answers = []
        for line, row, item, options, texts in examples:
            prediction = _need(path, line, row, name)
            chosen = label_text_prediction(prediction, list(options), texts)
            answers.append(Answer(line, item, options=options, chosen=chosen, answer_text=prediction))
        reads.append(Read(str(path), "bbq-results", None, "bbq", name, "bbq", answers))
    return reads


# plain CSV -------------------------------------------------------------------------------------------------------

def read_csv(path: Path, dataset: str | None) -> Read:
    """A plain CSV (see the module docstring): BBQ (example_id, answer) or CrowS-Pairs (pair_id, score_more,
    score_less)."""
    reader = csv.DictReader(io.StringIO(read_text(path), newline=""))
    header = reader.fieldnames or []
    rows = list(enumerate(reader, 2))
    if not rows:
        raise DataError(path, "holds no rows")
    if {"pair_id", "score_more", "score_less"} <= set(header):
        if dataset not in CROWS:
            raise UsageError(f"{path}: a CrowS-Pairs CSV needs --dataset {' or '.join(CROWS)} (which set its pair "
                             f"ids are of)")
        answers = []
        for line, row in rows:
            pair = (row.get("pair_id") or "").strip()
            for sentence, key in (("more", "score_more"), ("less", "score_less")):
                answers.append(Answer(line, pair, sentence=sentence, loglik=_float(path, line, row, key)))
        return Read(str(path), "csv", None, "crows-pairs", "", "crows", answers, dataset=dataset)
    if {"example_id", "answer"} <= set(header):
        if dataset not in (None, BBQ):
            raise UsageError(f"{path}: example_id and answer columns are a BBQ CSV, not {dataset}")
        answers = []
        for line, row in rows:
            raw = (row.get("example_id") or "").strip()
            category, sep, number = raw.rpartition(".")
            if not sep:
                category, number = (row.get("category") or "").strip(), raw
            item = _bbq_item(path, line, category, number)
            answer = (row.get("answer") or "").strip()
            if answer == "":
                raise DataError(path, "empty (an answer: 0-2, A-C or its text)", line=line, field="answer")
            answers.append(Answer(line, item, chosen=None, answer_text=answer))
        return Read(str(path), "csv", None, "bbq", "", "bbq", answers)
    raise DataError(path, f"columns {header}: expected example_id and answer (BBQ) or pair_id, score_more and "
                          f"score_less (CrowS-Pairs)", line=1)


def _float(path: Path, line: int, row: dict, key: str) -> float:
    try:
        value = float((row.get(key) or "").strip())
    except ValueError:
        raise DataError(path, f"not a number: {row.get(key)!r}", line=line, field=key) from None
    if not value <= 0.0:
        raise DataError(path, f"not a log-likelihood (a finite number <= 0): {value}", line=line, field=key)
    return value


# ------------------------------------------------------------------------------------------------ detecting the format

def detect(path: Path) -> str:
    """The format of `path` from its name and first bytes."""
    name = path.name.lower()
    if _SAMPLES.match(path.name):
        return "lm-eval"
    if name.endswith(".eval") or zipfile.is_zipfile(path):
        return "inspect"
    if name.endswith((".csv", ".csv.gz")):
        return "csv"
    if name.endswith((".jsonl", ".jsonl.gz")):
        return "bbq-results"
    if name.endswith((".json", ".json.gz")):
        return "inspect"
    raise UsageError(f"{path}: cannot tell its format from its name; give --from {' / '.join(FORMATS)}")


def _files(path: Path, kind: str) -> list[Path]:
    """The files of `path`: itself, or a folder's samples files (lm-eval's output folder) / logs / JSONL files."""
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise UsageError(f"{path}: no such file or folder")
    pattern = {"lm-eval": "samples_*.jsonl*", "inspect": "*.eval", "bbq-results": "*.jsonl", "csv": "*.csv"}[kind]
    found = sorted(p for p in path.rglob(pattern) if p.is_file())
    if not found:
        raise UsageError(f"{path}: no {pattern} file in it")
    return found


# ----------------------------------------------------------------------------------------------------- matching

def _stimuli(study: str, data_dir: PathLike | None) -> dict[str, list[Stimulus]]:
    """dataset -> its stimuli (loaded and verified from the data folder)."""
    root = loaders.default_data_dir(data_dir)
    names = [BBQ] if study == "bbq" else list(CROWS)
    found = {}
    for name in names:
        info = loaders.get(name)
        if info.path(root).is_dir():
            found[name] = info.load_verified(root).stimuli
    if not found:
        raise UsageError(f"dataset {' / '.join(names)} is not in the data folder {root} (set --data-dir or "
                         f"BIASLAB_DATA): an import is matched against the dataset's own stimuli")
    return found


def _match_bbq(read: Read, stimuli: list[Stimulus]) -> list[dict]:
    """Rows of `imported_answers` for a BBQ read (its stimuli checked)."""
    by_item = {s.item_id: s for s in stimuli}
    rows = []
    path = Path(read.path)
    for a in read.answers:
        s = by_item.get(a.item)
        if s is None:
            raise DataError(path, f"BBQ example {a.item} is not in dataset bbq (the data folder's files): ids of "
                                  f"another version or task?", line=a.line, field="example_id")
        if a.options is not None and tuple(a.options) != tuple(s.options):
            raise DataError(path, f"the answers {list(a.options)} differ from bbq's example {a.item} "
                                  f"{list(s.options)}: a file of another version or task?", line=a.line,
                            field="ans0")
        chosen = a.chosen
        if read.tool == "csv":
            chosen = _csv_answer(path, a, s)
        for k, option in enumerate(s.options):
            rows.append({"stimulus_id": s.stimulus_id, "option": option, "loglik": a.logliks.get(k),
                         "chosen": None if chosen is None else k == chosen, "answer_text": a.answer_text,
                         "source_line": a.line})
    return rows


def _csv_answer(path: Path, a: Answer, s: Stimulus) -> int | None:
    text = a.answer_text or ""
    if text in ("0", "1", "2"):
        return int(text)
    if len(text) == 1 and text.upper() in LETTERS:
        return LETTERS.index(text.upper())
    k = label_text_prediction(text, list(s.options), list(s.options))
    if k is None:
        raise DataError(path, f"{text!r} names none of example {a.item}'s answers {list(s.options)}", line=a.line,
                        field="answer")
    return k


def _match_crows(read: Read, found: dict[str, list[Stimulus]]) -> tuple[str, list[dict]]:
    """(dataset, rows of `imported_answers`) for a CrowS-Pairs read: sentences matched by text (lm-eval) or pair id
    (CSV) to one of the two sets."""
    path = Path(read.path)
    if read.dataset is not None:
        if read.dataset not in found:
            raise UsageError(f"dataset {read.dataset} is not in the data folder")
        by_pair = {(s.item_id, s.attrs["sentence"]): s for s in found[read.dataset]}
        rows = []
        for a in read.answers:
            s = by_pair.get((a.item, a.sentence))
            if s is None:
                raise DataError(path, f"pair {a.item!r} is not in dataset {read.dataset}", line=a.line,
                                field="pair_id")
            rows.append(_crows_row(s, a))
        return read.dataset, rows
    best = None
    for name, stimuli in found.items():
        by_text: dict[str, list[Stimulus]] = {}
        pairs: dict[str, dict[str, Stimulus]] = {}
        for s in stimuli:
            by_text.setdefault(s.text, []).append(s)
            pairs.setdefault(s.item_id, {})[s.attrs["sentence"]] = s
        rows, first_miss = [], None
        answers = read.answers
        for more, less in zip(answers[0::2], answers[1::2]):
            hit = next((p for p in (pairs[c.item_id] for c in by_text.get(more.text, ()))
                        if "less" in p and p["less"].text == less.text), None)
            if hit is None:
                first_miss = first_miss or more
                continue
            rows += [_crows_row(hit["more"], more), _crows_row(hit["less"], less)]
        if first_miss is None:
            return name, rows
        best = best or (name, first_miss)
    miss = best[1]
    raise DataError(path, f"the pair {miss.text!r} / ... matches no pair of {' or '.join(found)}: a file of another "
                          f"language or task?", line=miss.line, field="doc")


def _crows_row(s: Stimulus, a: Answer) -> dict:
    return {"stimulus_id": s.stimulus_id, "option": None, "loglik": a.loglik, "chosen": None, "answer_text": None,
            "source_line": a.line}


# ------------------------------------------------------------------------------------------------------- storing

def model_key(tool: str, version: str | None, task: str, model: str) -> str:
    """The key of an imported model record: hash of (tool, version, task, model), never a biaslab model's key."""
    return content_hash({"imported": tool, "version": version, "task": task, "model": model})


def _model_row(read: Read, key: str) -> dict:
    return {"model_key": key, "name": read.model, "source": read.path, "revision": None,
            "kind": "causal" if read.tool == "lm-eval" else "unknown", "dtype": read.dtype, "quant": "none",
            "tokenizer": None, "bos_policy": "unknown", "registered_at": datetime.now(UTC).replace(tzinfo=None),
            "backend": read.tool, "backend_version": read.version,
            "model_args": None, "engine_args": json.dumps({"tool": read.tool, "version": read.version,
                                                           "task": read.task, "model": read.model}, sort_keys=True),
            "converted_from": None}


def read_file(path: PathLike, kind: str | None = None, *, column: str | None = None, dataset: str | None = None
              ) -> list[Read]:
    """Everything `path` (a file or a folder) holds, read and checked for form, nothing stored."""
    path = Path(path)
    kind = kind or (detect(path) if path.is_file() else "lm-eval")
    if kind not in FORMATS:
        raise UsageError(f"unknown format {kind!r}; known: {', '.join(FORMATS)}")
    if column is not None and kind != "bbq-results":
        raise UsageError("--column belongs to --from bbq-results (a BBQ results file's prediction column)")
    reads = []
    for file in _files(path, kind):
        if kind == "lm-eval":
            reads.append(read_lm_eval(file))
        elif kind == "inspect":
            reads.append(read_inspect(file))
        elif kind == "bbq-results":
            reads += read_bbq_results(file, column)
        else:
            reads.append(read_csv(file, dataset))
    return reads


def import_answers(path: PathLike, db: PathLike = "warehouse/biaslab.duckdb", *, kind: str | None = None,
                   model: str | None = None, column: str | None = None, dataset: str | None = None,
                   data_dir: PathLike | None = None) -> ImportResult:
    """Import another tool's answers or scores into `db` (see the module docstring).

    Parameters
    ----------
    path : a file, or a folder of them (lm-eval's output folder; a folder of BBQ results files).
    db : the warehouse (created when absent).
    kind : one of `FORMATS` (default: from the file's name and content).
    model : the model's name (default: the tool's own record of it; required where the file names none).
    column : bbq-results: the prediction column (default: every column whose name holds 'pred').
    dataset : csv: crows-pairs or crows-pairs-revised (BBQ needs none).
    data_dir : the folder holding the datasets (default: BIASLAB_DATA, else beside the checkout).

    Returns
    -------
    ImportResult, one entry per model imported.
    """
    reads = read_file(path, kind, column=column, dataset=dataset)
    groups: dict[str, dict[str, Any]] = {}  # model key -> the reads of one model (a folder's files: one import)
    stimuli_rows = {}
    cache: dict[str, dict[str, list[Stimulus]]] = {}
    several = len({r.model for r in reads}) > 1  # e.g. a BBQ results file's prediction columns
    for read in reads:
        if model:
            read.model = f"{model} {read.model}" if several else model
        if read.study not in cache:  # each dataset loaded once, however many files or columns name it
            cache[read.study] = _stimuli(read.study, data_dir)
        found = cache[read.study]
        if read.study == "bbq":  # `_stimuli` refuses a data folder without it
            name, rows = BBQ, _match_bbq(read, found[BBQ])
        else:
            name, rows = _match_crows(read, found)
        if not read.model:  # after the rows are checked: bad data is named first
            raise UsageError(f"{read.path}: the file names no model (no results_*.json beside it); give --model NAME")
        key = model_key(read.tool, read.version, read.task, read.model)
        for row in rows:
            row.update(model_key=key, tool=read.tool, task=read.task,
                       request_id=content_hash({"stimulus_id": row["stimulus_id"], "option": row["option"],
                                                "import": 1}))
        group = groups.setdefault(key, {"read": read, "dataset": name, "rows": [], "files": [], "answers": 0})
        group["rows"] += rows
        group["files"].append(read.path)
        group["answers"] += len(read.answers) // (2 if read.study == "crows" else 1)
        if name not in stimuli_rows:
            stimuli_rows[name] = [s.to_row() for s in found[name]]
    return ImportResult(str(db), tuple(_store(db, path, groups, stimuli_rows)))


def _store(db: PathLike, path: PathLike, groups: dict[str, dict[str, Any]], stimuli_rows: dict[str, list[dict]]
           ) -> list[dict[str, Any]]:
    """Append the datasets' stimuli, and per imported model its record, a run and its answers, in one transaction
    (all or none; nothing new: nothing recorded). Returns one entry per model."""
    imported = []
    with Warehouse.open(db) as wh:
        with wh.transaction():  # stimuli, model records, answers and the run row: all stored or none
            for rows in stimuli_rows.values():
                wh.append("stimuli", rows)
            total = 0
            for key, group in groups.items():
                read = group["read"]
                wh.append("models", [_model_row(read, key)])
                params = {"dataset": group["dataset"], "protocol": "import", "tool": read.tool,
                          "version": read.version, "task": read.task, "model": read.model, "path": str(path),
                          "files": group["files"]}
                run_id = wh.start_run(f"biaslab import {path}", params, model_key=key)
                for row in group["rows"]:
                    row["run_id"] = run_id
                added = wh.append("imported_answers", group["rows"])
                wh.finish_run(run_id, rows_added=added)
                total += added
                imported.append({"model": read.model, "tool": read.tool, "version": read.version, "task": read.task,
                                 "dataset": group["dataset"], "model_key": key, "files": group["files"],
                                 "answers": group["answers"], "rows": len(group["rows"]), "added": added})
            if not total:
                raise Rollback  # nothing new: nothing recorded
    return imported
