"""Forced-choice prompts: a versioned prompt file rendered with the model's own chat template.

Adaptations, detected by rendering (the template's own exception) and recorded with every request (the
`adaptation` column of `choice_requests`, part of the request id):

- `system_role`: the template takes the system message; `system_folded_into_user`: it raises on a system role (or
  drops its text), so the system text opens the user turn (the contextual-invariance paper did this for Gemma);
- `prefill_appended`: the template takes an assistant message to continue, and the prefill is appended after the
  generation prompt; `no_prefill`: it raises on an assistant message, so the prompt ends at the generation prompt
  and the model must write the prefill's text itself (`AnswerParser.lead`, whitespace ignored; the generation gets
  as many more tokens as the prefill has, recorded as `no_prefill(+N)`);
- `final_channel`: the tokenizer speaks a channel format (gpt-oss harmony); the answer is read from the final
  channel (`AnswerParser.final_marker`).

Models without a chat template get a plain "system\\n\\nuser\\n" rendering.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from ..errors import DataError, UsageError
from ..schema import Stimulus

DEFAULT_PROMPT = "forced_choice_v1"


@dataclass(frozen=True)
class PromptSpec:
    version: str
    system: str
    user: str
    prefill: str
    closing: str

    @classmethod
    def load(cls, name_or_path: str = DEFAULT_PROMPT) -> PromptSpec:
        """A packaged prompt by name, or a JSON file with the same fields.

        Raises ValueError with one line naming the file for: a missing file, invalid JSON (with line and column),
        a JSON value that is not an object, a missing or non-string field, and a user template without the
        {passage}, {option_1} and {option_2} placeholders.
        """
        path = Path(name_or_path)
        if path.suffix == ".json":
            if not path.is_file():
                raise UsageError(f"--prompt: no prompt file at {path}")
            try:
                where, text = str(path), path.read_text(encoding="utf-8")
            except UnicodeDecodeError as exc:  # not a text file: the user's file, not a bug
                raise DataError(f"{path}: not UTF-8 text ({exc})") from None
        else:
            resource = resources.files("biaslab.runners").joinpath(f"prompts/{name_or_path}.json")
            if not resource.is_file():
                raise UsageError(f"unknown prompt {name_or_path!r} (a packaged name or a .json file)")
            where, text = f"biaslab/runners/prompts/{name_or_path}.json", resource.read_text(encoding="utf-8")
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DataError(f"{where}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}") from None
        return cls.from_mapping(data, where)

    @classmethod
    def from_mapping(cls, data: object, where: str) -> PromptSpec:
        """A prompt from its fields (a prompt file's JSON object, or a user dataset's declared prompt); ValueError
        in one line naming `where` for a value that is not an object, a missing or non-string field, and a user
        template without the {passage}, {option_1} and {option_2} placeholders."""
        if not isinstance(data, dict):
            raise DataError(f"{where}: a prompt file holds one JSON object, got {type(data).__name__}")
        fields = ("version", "system", "user", "prefill", "closing")
        missing = [k for k in fields if k not in data]
        if missing:
            raise DataError(f"{where}: missing field(s) {', '.join(missing)} (a prompt file needs {', '.join(fields)})")
        wrong = [k for k in fields if not isinstance(data[k], str)]
        if wrong:
            raise DataError(f"{where}: field(s) {', '.join(wrong)} must be strings")
        for placeholder in ("{passage}", "{option_1}", "{option_2}"):
            if placeholder not in data["user"]:
                raise DataError(f"{where}: field 'user' lacks the placeholder {placeholder}")
        return cls(**{k: data[k] for k in fields})


def passage(stimulus: Stimulus) -> str:
    """The passage shown: the prime sentence (if any) followed by the text with its BLANK."""
    return f"{stimulus.prime} {stimulus.text}" if stimulus.prime else stimulus.text


@dataclass(frozen=True)
class RenderedPrompt:
    """A rendered prompt, the adaptations used (see the module docstring), the text the model must write before
    the answer (`lead`: the prefill, when the template rejects it) and the extra tokens granted for it."""

    text: str
    adaptation: str
    lead: str = ""
    lead_tokens: int = 0
    final_marker: str | None = None


def render(spec: PromptSpec, tokenizer, stimulus: Stimulus) -> RenderedPrompt:
    """The full prompt text up to and including the assistant prefill."""
    if stimulus.options is None or len(stimulus.options) != 2:
        raise DataError(f"stimulus {stimulus.item_id}: a forced choice needs exactly two options")
    user = spec.user.format(passage=passage(stimulus), option_1=stimulus.options[0], option_2=stimulus.options[1])
    return _render_user(spec, tokenizer, user)


def _render_user(spec: PromptSpec, tokenizer, user: str) -> RenderedPrompt:
    template = getattr(tokenizer, "chat_template", None)
    if not template:
        return RenderedPrompt(f"{spec.system}\n\n{user}\n{spec.prefill}", "no_chat_template+prefill_appended")
    messages = [{"role": "system", "content": spec.system}, {"role": "user", "content": user}]
    try:
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        adaptation = "system_role"
        if spec.system not in text:
            raise ValueError("system text dropped by the template")
    except Exception:  # noqa: BLE001 - templates signal "no system role" in many ways; fall back explicitly
        messages = [{"role": "user", "content": f"{spec.system}\n\n{user}"}]
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        adaptation = "system_folded_into_user"
    from .answers import channel_marker

    marker = channel_marker(tokenizer)
    suffix = "+final_channel" if marker else ""
    if not spec.prefill or _takes_prefill(tokenizer, messages, spec.prefill):
        return RenderedPrompt(text + spec.prefill, f"{adaptation}+prefill_appended{suffix}", final_marker=marker)
    extra = len(tokenizer(spec.prefill, add_special_tokens=False)["input_ids"])
    return RenderedPrompt(text, f"{adaptation}+no_prefill(+{extra}){suffix}", lead=spec.prefill, lead_tokens=extra,
                          final_marker=marker)


def _takes_prefill(tokenizer, messages: list[dict], prefill: str) -> bool:
    """Whether the chat template renders an assistant message to continue (False: it raises on one)."""
    try:
        tokenizer.apply_chat_template([*messages, {"role": "assistant", "content": prefill}], tokenize=False,
                                      continue_final_message=True)
    except Exception:  # noqa: BLE001 - a template's own refusal (raise_exception) or a role check
        return False
    return True


_SLOT = "\ue000"  # a private-use character: never in a template or a stimulus


def shared_prefix_ids(spec: PromptSpec, tokenizer) -> list[int]:
    """Token ids of the rendered prompt up to its first stimulus-dependent character (system text, chat markup and
    the instructions before the passage), as every prompt of this template and tokenizer begins.

    A prompt's shared prefix is then its longest common token prefix with these ids (`kvcache.SharedPrefixes`):
    where the tokenizer merges the last prefix characters with the passage, the shared part simply ends earlier.
    """
    text = _render_user(spec, tokenizer, spec.user.format(passage=_SLOT, option_1=_SLOT, option_2=_SLOT)).text
    return tokenizer(text[: text.index(_SLOT)], add_special_tokens=False)["input_ids"]
