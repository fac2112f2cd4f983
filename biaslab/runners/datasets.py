"""The dataset of a collection, built in or a user's own: `resolve(name, db)` gives one `DatasetRef` whatever its
origin, and the protocols read from it what they need (the protocols it offers, TANGO's derived prob stimuli, the
forced-choice prompt, the gen protocol's pronoun families). A user dataset is read from the warehouse it was loaded
into (`biaslab data load --file / --spec`), so collecting needs neither its file nor any code."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import loaders
from ..errors import UsageError
from ..lexicon import pronoun_detection
from ..schema import Stimulus

if TYPE_CHECKING:  # Arrow's import (through the evidence schemas) only where a user dataset is read
    from ..warehouse.user_datasets import StoredDataset


#: a counterfactual audit's generation settings where the command line gives none: the model's own distribution
#: (temperature 1, no top-k or top-p truncation, as LangFair's and DecodingTrust's defaults sample), 5 answers of at
#: most 100 tokens per variant, stopping where the model ends its answer
COUNTERFACTUAL_GEN = {"samples": 5, "temperature": 1.0, "top_k": 262_144, "top_p": 1.0, "max_new_tokens": 100,
                      "min_new_tokens": 0}


@dataclass(frozen=True)
class DatasetRef:
    """A dataset a collection asks: `info` for a built-in one, `stored` for a user's (exactly one is set)."""

    name: str
    info: Any = None                    # loaders.DatasetInfo
    stored: StoredDataset | None = None

    @property
    def user(self) -> bool:
        return self.stored is not None

    @property
    def protocols(self) -> tuple[str, ...]:
        """The protocols its stimuli are asked with, the default first."""
        return tuple(self.stored.declaration.protocols) if self.user else tuple(self.info.protocols)

    @property
    def prob_from(self) -> str | None:
        """Where the prob protocol's stimuli come from (`DatasetInfo.prob_from`; None for a user dataset)."""
        return None if self.user else self.info.prob_from

    @property
    def strata(self) -> tuple[str, ...]:
        """The strata a limited run spreads over (`runners.sampling`): a built-in dataset's declared ones, a user
        dataset's declared unit (`unit:`), else none."""
        if self.user:
            unit = self.stored.declaration.unit
            return (unit if unit in Stimulus.model_fields else f"attrs.{unit}",) if unit else ()
        return tuple(self.info.strata)

    @property
    def sample_item(self) -> str:
        """What a limited run counts as one item (`DatasetInfo.sample_item`; a user dataset's item id)."""
        return "item_id" if self.user else self.info.sample_item

    @property
    def counterfactual(self) -> bool:
        """Whether this is a user's counterfactual audit (`biaslab data load --kind counterfactual`)."""
        return self.user and self.stored.declaration.kind == "counterfactual"

    def defaults(self, protocol: str) -> dict[str, Any]:
        """The settings a built-in dataset gives `protocol` where the command line does not
        (`DatasetInfo.settings`; a counterfactual audit's gen settings, `COUNTERFACTUAL_GEN`; {} for another user
        dataset)."""
        if self.counterfactual and protocol == "gen":
            return dict(COUNTERFACTUAL_GEN)
        return {} if self.user else dict(self.info.settings.get(protocol, {}))

    def families(self) -> dict[str, dict[str, tuple[str, ...]]] | None:
        """The gen protocol's pronoun families: the user's declared ones, or the misgendering detector's for the
        built-in datasets it knows (None otherwise)."""
        if self.user:
            pronouns = self.stored.declaration.pronouns
            return {f: {c: tuple(v) for c, v in cases.items()} for f, cases in pronouns.items()} if pronouns else None
        name = self.info.pronoun_vocabulary
        return pronoun_detection.vocabulary(name) if name is not None else None

    @property
    def gen_prompt(self) -> str:
        """How the gen protocol prompts this dataset's stimuli (`DatasetInfo.gen_prompt`; a counterfactual audit: as
        a user message, "dialogue"; other user datasets: the text continued)."""
        if self.counterfactual:
            return "dialogue"
        return "continuation" if self.user else self.info.gen_prompt

    def prompt(self):
        """The forced-choice prompt the dataset declares (`prompting.PromptSpec`): a user dataset's own, a built-in
        dataset's packaged one (`DatasetInfo.prompt`, e.g. BBQ's), or None (the built-in forced-choice prompt)."""
        from .prompting import PromptSpec

        if not self.user:
            return PromptSpec.load(self.info.prompt) if self.info.prompt else None
        if self.stored.declaration.prompt is None:
            return None
        return PromptSpec.from_mapping(self.stored.declaration.prompt, f"the prompt of dataset {self.name}")


def resolve(name: str, db: str | Path) -> DatasetRef:
    """The built-in dataset `name`, else the user dataset `name` loaded into the warehouse `db`; ValueError in one
    line naming both kinds otherwise."""
    if name in loaders.MODULES:
        return DatasetRef(name, info=loaders.get(name))
    stored = None
    if Path(db).is_file():
        from ..warehouse import Warehouse
        from ..warehouse.user_datasets import current

        with Warehouse.open(db, read_only=True) as wh:
            stored = current(wh, name)
    if stored is None:
        raise UsageError(f"unknown dataset {name!r}: not built in ({', '.join(sorted(loaders.MODULES))}) and not "
                         f"loaded into {db}; load your own with `biaslab data load --file FILE --name {name}` "
                         f"(or --spec SPEC)")
    return DatasetRef(name, stored=stored)
