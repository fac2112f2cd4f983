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
import string
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from ..errors import DataError, UsageError
from ..schema import CHOICE_OPTIONS, Stimulus

DEFAULT_PROMPT = "forced_choice_v1"
#: the fewest and the most options a forced choice shows
MIN_OPTIONS, MAX_OPTIONS = CHOICE_OPTIONS
#: the placeholder of the whole option list, joined by `separator` (and `last_separator` before the last option)
OPTIONS = "options"
#: the placeholder, in a prompt's system text, of the stimulus' own system prompt (`attrs.system_prompt`:
#: DecodingTrust's benign, untargeted and targeted conditions)
SYSTEM_PROMPT = "{system_prompt}"


@dataclass(frozen=True)
class PromptSpec:
    """A forced-choice prompt: system text, user template, assistant prefill and the one closing character.

    The user template names `{passage}` and the options, either as one list `{options}` (the options joined by
    `separator`, the last one after `last_separator`: ", " and " or " give "she, he or they") or numbered
    `{option_1}, {option_2}` (the built-in prompt's "[{option_1}, {option_2}]"). Numbered options joined by one
    separator without letters or digits are a list: it shows as many options as the stimulus has, joined by that
    separator ("[she, he, they]"); a stimulus with two options renders exactly as `str.format` did before N options
    (every stored request id unchanged). Other numbered layouts show exactly as many options as they number.
    """

    version: str
    system: str
    user: str
    prefill: str
    closing: str
    separator: str = ", "
    last_separator: str | None = None

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
        """A prompt from its fields (a prompt file's JSON object, or a user dataset's declared prompt; the optional
        `separator` and `last_separator` word the `{options}` list); ValueError in one line naming `where` for a
        value that is not an object, a missing or non-string field, and a user template without {passage} and
        without either {options} or both {option_1} and {option_2}."""
        if not isinstance(data, dict):
            raise DataError(f"{where}: a prompt file holds one JSON object, got {type(data).__name__}")
        fields = ("version", "system", "user", "prefill", "closing")
        missing = [k for k in fields if k not in data]
        if missing:
            raise DataError(f"{where}: missing field(s) {', '.join(missing)} (a prompt file needs {', '.join(fields)})")
        optional = [k for k in ("separator", "last_separator") if k in data]
        wrong = [k for k in (*fields, *optional) if not isinstance(data[k], str)]
        if wrong:
            raise DataError(f"{where}: field(s) {', '.join(wrong)} must be strings")
        names = _fields(data["user"], where)
        needed = ["passage"] if OPTIONS in names else ["passage", "option_1", "option_2"]
        for name in needed:
            if name not in names:
                hint = " (or {options}, the whole list)" if name.startswith("option_") else ""
                raise DataError(f"{where}: field 'user' lacks the placeholder {{{name}}}{hint}")
        return cls(**{k: data[k] for k in (*fields, *optional)})

    def user_text(self, passage_text: str, options: Sequence[str], where: str = "a stimulus") -> str:
        """The user message showing `passage_text` and `options` (see the class docstring); DataError naming
        `where` for fewer than `MIN_OPTIONS` or more than `MAX_OPTIONS` options, and for a numbered layout that
        cannot show this many."""
        n = len(options)
        if not MIN_OPTIONS <= n <= MAX_OPTIONS:
            raise DataError(f"{where}: a forced choice shows {MIN_OPTIONS} to {MAX_OPTIONS} options, this one has {n}")
        numbered = {f"option_{i + 1}": o for i, o in enumerate(options)}
        listed = self.listed(options)
        run = _numbered_run(self.user)
        if run is None or run[0] == n:
            return self.user.format(passage=passage_text, options=listed, **numbered)
        count, separator = run
        if separator is None:
            raise DataError(f"{where}: prompt {self.version!r} numbers {count} options in its own layout and this "
                            f"stimulus has {n}: write the list as {{options}} (joined by the prompt's `separator`)")
        out: list[str] = []
        for literal, name, spec, conversion in string.Formatter().parse(self.user):
            index = _option_index(name)
            if index is not None and 1 < index <= count:
                continue  # the list's other members: shown with option_1
            out.append(literal)
            if name is None:
                continue
            if index == 1:
                out.append(separator.join(options))
                continue
            value = {"passage": passage_text, OPTIONS: listed, **numbered}[name]
            out.append(format(value if conversion is None else repr(value) if conversion == "r" else str(value), spec))
        return "".join(out)

    def listed(self, options: Sequence[str]) -> str:
        """The `{options}` list: "a, b or c" with separator ", " and last_separator " or "."""
        last = self.separator if self.last_separator is None else self.last_separator
        if len(options) < 2:
            return "".join(options)
        return self.separator.join(options[:-1]) + last + options[-1]


def _fields(template: str, where: str) -> set[str]:
    try:
        return {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
    except ValueError as exc:
        raise DataError(f"{where}: field 'user' is not a valid template ({exc}; write {{{{ and }}}} for braces)") \
            from None


def _option_index(name: str | None) -> int | None:
    if name is None or not name.startswith("option_") or not name[7:].isdigit():
        return None
    return int(name[7:])


def _numbered_run(template: str) -> tuple[int, str | None] | None:
    """(count, separator) of the numbered options `{option_1}` ... `{option_k}` of `template`: the
    separator when they come in order, each once, joined by one and the same text without letters or digits
    (a list that can grow or shrink), else None; None altogether without numbered options."""
    parsed = list(string.Formatter().parse(template))
    positions = [(i, _option_index(name)) for i, (_, name, _, _) in enumerate(parsed) if _option_index(name)]
    if not positions:
        return None
    indices = [index for _, index in positions]
    count = max(indices)
    adjacent = [i for i, _ in positions] == list(range(positions[0][0], positions[0][0] + len(positions)))
    if indices != list(range(1, count + 1)) or not adjacent:  # another field between them: not one list
        return count, None
    between = {parsed[i][0] for i, _ in positions[1:]}
    separator = between.pop() if len(between) == 1 else None
    if separator is not None and (not separator or any(c.isalnum() for c in separator)):
        separator = None
    return count, separator


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
    return _render_user(for_stimulus(spec, stimulus), tokenizer, user_message(spec, stimulus))


def for_stimulus(spec: PromptSpec, stimulus: Stimulus) -> PromptSpec:
    """`spec` with its system text's `{system_prompt}` (if any) replaced by the stimulus' `attrs.system_prompt`;
    DataError naming the stimulus where it has none."""
    if SYSTEM_PROMPT not in spec.system:
        return spec
    own = stimulus.attrs.get("system_prompt")
    if not isinstance(own, str):
        raise DataError(f"stimulus {stimulus.item_id}: prompt {spec.version!r} shows the stimulus' own system prompt "
                        f"and this stimulus has none (attrs.system_prompt)")
    from dataclasses import replace

    return replace(spec, system=spec.system.replace(SYSTEM_PROMPT, own))


def user_message(spec: PromptSpec, stimulus: Stimulus) -> str:
    """The user message of `stimulus`: its passage and its options (`PromptSpec.user_text`)."""
    where = f"stimulus {stimulus.item_id}"
    if stimulus.options is None:
        raise DataError(f"{where}: a forced choice needs options")
    return spec.user_text(passage(stimulus), stimulus.options, where)


def has_chat_template(tokenizer) -> bool:
    """Whether the tokenizer renders chat messages (an instruction-tuned model); False for a base model's."""
    return bool(getattr(tokenizer, "chat_template", None))


def _render_user(spec: PromptSpec, tokenizer, user: str) -> RenderedPrompt:
    if not has_chat_template(tokenizer):
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
    from dataclasses import replace

    slotted = replace(spec, system=spec.system.replace(SYSTEM_PROMPT, _SLOT))
    text = _render_user(slotted, tokenizer, spec.user_text(_SLOT, (_SLOT, _SLOT))).text
    return tokenizer(text[: text.index(_SLOT)], add_special_tokens=False)["input_ids"]
