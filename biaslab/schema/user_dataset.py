"""A user's own dataset: what `biaslab data load --file / --spec` stores beside its stimuli (the `user_datasets`
table), so that `runners collect --dataset NAME` and `biaslab metrics options` need neither the file nor code.

One row per (dataset, version, loaded_at): `version` hashes the declaration and the ordered stimulus ids, so loading
the same file again writes nothing, and loading an edited file adds a version (its changed rows are new stimuli; the
unchanged rows keep their ids and their evidence). The current version of a dataset is its latest row.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..errors import DataError, UsageError
from .identity import content_hash

#: the protocols a user dataset may declare (docs/design.md section 11)
USER_PROTOCOLS = ("prob", "choice", "gen")
#: a user dataset's name: lower-case letters, digits, '.', '_' and '-', starting with a letter or digit
NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")


def check_name(name: str) -> str:
    """`name` when it is a valid user dataset name (`NAME`), else ValueError in one line."""
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise UsageError(f"dataset name {name!r}: use 1-64 lower-case letters, digits, '.', '_' or '-', starting "
                         f"with a letter or digit (e.g. my-study)")
    return name


class DatasetDeclaration(BaseModel):
    """How a user dataset is asked: its protocols (the default first), the forced-choice prompt (the content of a
    prompt JSON with the fields of `biaslab/runners/prompts/forced_choice_v1.json`; None: the built-in one) and the
    pronoun families of the gen protocol's first-pronoun detector (family -> case -> forms; None: no gen)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    source: Literal["file", "spec"]
    path: str = Field(description="the file or spec as given")
    file_sha256: str = Field(description="sha256 of the file's (or the spec's) bytes")
    description: str = ""
    protocols: tuple[Literal["prob", "choice", "gen"], ...] = ("prob",)
    prompt: dict[str, Any] | None = None
    pronouns: dict[str, dict[str, tuple[str, ...]]] | None = None
    #: the study's unit for correlations (a stimuli column or attrs key, e.g. name); None: the item
    unit: str | None = None
    #: what a stimulus id hashes (`schema.stimulus.stimulus_type`): "seen" leaves out the attributes (a rating, a
    #: filler attribute: issue 44), "all" every field: a dataset first loaded before keeps "all" (its stored
    #: declaration has no `identity`), so its stored stimuli keep their ids and their evidence
    identity: Literal["all", "seen"] = "all"
    #: "stimuli" (a file or spec of stimuli) or "counterfactual" (a file of prompts whose variants are the stimuli:
    #: `loaders.user.counterfactual`; the gen protocol sends each as a user message, `metrics counterfactual` reads)
    kind: Literal["stimuli", "counterfactual"] = "stimuli"
    #: a counterfactual dataset's audit: attributes, system prompt, and the prompts with no word of each attribute
    counterfactual: dict[str, Any] | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_name(value)

    @field_validator("protocols")
    @classmethod
    def _protocols(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value:
            raise DataError("protocols: declare at least one (prob, choice, gen)")
        if len(set(value)) != len(value):
            raise DataError(f"protocols: {list(value)} repeats a protocol")
        return value

    def version(self, stimulus_ids: list[str]) -> str:
        """The version key: a hash of the declaration (without the path; without `unit`, `identity`, `kind` and
        `counterfactual` where they hold their defaults, so every version stored before they existed keeps its key)
        and the ordered stimulus ids."""
        exclude = {"path"} | {k for k, before in (("unit", None), ("identity", "all"), ("kind", "stimuli"),
                                                  ("counterfactual", None)) if getattr(self, k) == before}
        return content_hash({"declaration": self.model_dump(mode="json", exclude=exclude), "stimuli": stimulus_ids})
