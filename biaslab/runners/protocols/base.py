"""The contract of a runner protocol (prob, choice, meta, gen): a plug-in of the one collect loop
(`biaslab.runners.collect`).

A protocol declares its settings (a pydantic model, unknown options refused), the engine capabilities it needs
(`needs`: the capability names of `biaslab.engines.base`), the evidence table a run's rows are counted in, and four
steps the loop calls in order:

1. `stimuli(wh, dataset, model_key, stimuli)`: the stimuli it asks (by default those given; TANGO's prob scores
   templates built from the model's own stored generations);
2. `requests(stimuli, prepared)`: every request, each with its identity (`request_id`, docs/design.md section 3), built
   with the prepared model's tokenizer (`prepared.tokenizer`; its kind in `prepared.spec.kind`);
3. `pending(wh, model_key, requests)`: what is not stored yet (the resume point);
4. `run(wh, backend, work, run_id=..., chunk_size=..., on_progress=...)`: compute and append the pending work,
   chunk by chunk, each chunk in one transaction; returns the rows added to `table`.

Everything a protocol needs from an engine is the `biaslab.engines.base.Backend` interface; nothing is probed.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ...engines.base import CHAT, SamplingSettings, require
from ...errors import UsageError
from ...schema import Stimulus

Progress = Callable[[int], None] | None
#: the most samples one prompt may ask for (`--samples`): 1,000 x the contextual-invariance paper's 200 per prompt
MAX_SAMPLES = 200_000
#: bounds of the sampling settings (issue 45): a finite temperature up to 100 (softmax at T = 100 is already flat to
#: 1e-2 for logits within 1 of each other), top-k and k-store up to 2^18 (above every vocabulary in use: Gemma's is
#: 262,144), generations up to 32,768 new tokens, seeds that fit a BIGINT column
MAX_TEMPERATURE = 100.0
MAX_TOP_K = 262_144
MAX_NEW_TOKENS = 32_768
MAX_SEED = 2**63 - 1


def arrow(table: str, columns: Any, **constants: Any) -> Any:
    """`schema.evidence.arrow(table, columns, **constants)`: rows of an evidence table as Arrow, the schema module
    (and with it pyarrow and NumPy) imported on first use, since `audit status` and `--dry-run` import the
    protocols and write nothing."""
    from ...schema import evidence

    return evidence.arrow(table, columns, **constants)


class Settings(BaseModel):
    """A protocol's own settings; every field is a `runners collect` option (`--field-name`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Sampling(Settings):
    """The sampling options every sampling protocol has, declared once; each protocol gives its own defaults
    (`DEFAULTS`, every field), applied where an option is not given."""

    DEFAULTS: ClassVar[dict[str, Any]] = {}

    samples: int = Field(None, ge=1, le=MAX_SAMPLES)
    seed: int = Field(None, ge=0, le=MAX_SEED)
    temperature: float = Field(None, gt=0, le=MAX_TEMPERATURE, allow_inf_nan=False)
    top_k: int = Field(None, ge=0, le=MAX_TOP_K)  # 0: no top-k truncation (chat APIs without top_k; refused in process)
    top_p: float = Field(None, gt=0, le=1, allow_inf_nan=False)
    max_new_tokens: int = Field(None, ge=1, le=MAX_NEW_TOKENS)

    @model_validator(mode="before")
    @classmethod
    def _defaults(cls, data: Any) -> Any:
        return {**cls.DEFAULTS, **data} if isinstance(data, dict) else data

    def sampling(self) -> SamplingSettings:
        """The engine's sampling settings (no stop suppression)."""
        return SamplingSettings(self.temperature, self.top_k, self.top_p, self.max_new_tokens)


@dataclass
class Work:
    """What `pending` found: `count` requests have something to compute; `items` is the protocol's own description
    of it (requests, or requests with their missing sample indices); `requests` every request (chunk boundaries are
    fixed over all of them)."""

    count: int
    items: Any
    requests: list


class Protocol(ABC):
    """A runner protocol (see the module docstring). Instances hold validated settings."""

    name: ClassVar[str]
    settings_model: ClassVar[type[Settings]]
    #: the evidence table whose rows a run adds (counted when a run stops early)
    table: ClassVar[str]

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.dataset: Any = None  # the `runners.datasets.DatasetRef` asked, set by `bind`
        self.chat = False  # the engine is a chat API (messages, no token ids), set by `require`

    def bind(self, dataset: Any) -> None:
        """The dataset this protocol asks (`runners.datasets.DatasetRef`): its prompt, pronoun families, derived
        stimuli."""
        self.dataset = dataset

    def capability(self, kind: str) -> str:
        """What this protocol runs for a model of `kind` ("causal" / "masked"), as refusals name it: "prob", "pll",
        "choice-exact", "choice-sample", "gen"."""
        return self.name

    @abstractmethod
    def needs(self, kind: str) -> frozenset[str]:
        """The engine capabilities it needs for a model of `kind` (`biaslab.engines.base` SCORE, PLL, TOP_K,
        SAMPLE): refused before any model loads where the engine lacks one (`require`), and verified by the
        prepared engine (`Prepared.verify`; a server is asked) before any run row is written."""

    def require(self, backend: str, capabilities: frozenset[str], kind: str,
                why: dict[str, str] | None = None) -> frozenset[str]:
        """Refuse (`Unsupported`, one line, with the engine's reason `why` where it gives one) an engine `backend`
        whose `capabilities` lack what this protocol needs for a model of `kind`; returns the needs. An engine with
        the CHAT capability is a chat API: the protocol then asks it with messages (`chat`)."""
        self.chat = CHAT in capabilities
        if not self.chat and getattr(self.settings, "top_k", None) == 0:
            raise UsageError("--top-k 0 (no top-k truncation) is for chat APIs without top_k; give --top-k >= 1")
        needs = self.needs(kind)
        require(backend, capabilities, needs, self.capability(kind), why)
        return needs

    def check(self) -> None:
        """Refuse what cannot run (a bad prompt file, ...) before any model loads; the settings are valid already."""

    def check_engine(self, prepared: Any) -> None:
        """Refuse what the resolved engine cannot do (e.g. a K above its limit), before any run row is written."""

    def setup_notes(self, prepared: Any) -> list[str]:
        """Lines the run prints about how the model is asked (none by default)."""
        return []

    def result_notes(self, wh, model_key: str, requests: Sequence) -> list[str]:
        """Lines the run prints after it, about what its evidence says (none by default)."""
        return []

    def stimuli(self, wh, model_key: str, stimuli: list[Stimulus]) -> tuple[list[Stimulus], str]:
        """The stimuli asked, and a note for the command output ("" for none)."""
        return stimuli, ""

    @abstractmethod
    def requests(self, stimuli: Sequence[Stimulus], prepared: Any) -> list:
        """Every request of the stimuli, in stimulus order."""

    @abstractmethod
    def pending(self, wh, model_key: str, requests: Sequence) -> Work:
        """What is not stored yet for this model."""

    @abstractmethod
    def provenance(self) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """(run parameters beyond the settings, e.g. protocol_version; the effective generation config or None)."""

    @abstractmethod
    def run(self, wh, backend: Any, work: Work, *, run_id: str, chunk_size: int, on_progress: Progress) -> int:
        """Compute and append `work`; returns rows added to `table`."""
