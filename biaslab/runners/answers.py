"""The forced-choice answer parser, shared by sample mode and exact mode so both count the same event.

Parsing (docs/design.md section 6): the generated text after the prefill is read up to the closing quote (one character;
or to the end of generation when no quote comes); the answer is valid when, trimmed, it equals one of the options
ignoring case (Unicode case folding). Where the chat template rejected the prefill, the model must first write the
prefill's text itself (`lead`, whitespace ignored); in channel formats (gpt-oss) only the final channel counts. A
partial text ending in U+FFFD (a multi-byte character split across tokens)
stays live in exact mode until generation ends.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Literal

from ..errors import DataError

Status = Literal["valid", "invalid", "live"]


def decode(tokenizer, token_ids, keep_special: bool = False) -> str:
    """Generated token ids to text, exactly as the parser sees them (special tokens dropped, except for channel
    formats, whose markers are special tokens: `keep_special`)."""
    return tokenizer.decode(list(token_ids), skip_special_tokens=not keep_special, clean_up_tokenization_spaces=False)


def decode_many(tokenizer, sequences, keep_special: bool = False) -> list[str]:
    """`decode` of each sequence, in one call: the same texts, far less Python per sequence.

    A fast tokenizer whose decoding transformers does not override (`_rust_decoder`) decodes the batch in its Rust
    backend (`tokenizers.Tokenizer.decode_batch`): what `decode` computes without clean-up, without transformers'
    argument conversion (measured: ~18 us per sequence, against ~3 us for the decoding itself; exact mode decodes
    every top-K token of every node, ~10^6 sequences for 20 prompts of a random tiny model).
    Any other tokenizer goes through its own `batch_decode`.
    """
    sequences = [list(s) for s in sequences]
    if not sequences:
        return []
    if _rust_decoder(type(tokenizer)):
        return tokenizer.backend_tokenizer.decode_batch(sequences, skip_special_tokens=not keep_special)
    return tokenizer.batch_decode(sequences, skip_special_tokens=not keep_special, clean_up_tokenization_spaces=False)


@functools.cache
def _rust_decoder(cls: type) -> bool:
    """Whether `cls` decodes with transformers' own fast-tokenizer path unchanged (`TokenizersBackend._decode`, reached
    through the base `decode` / `batch_decode`): then its text without clean-up is the Rust backend's."""
    try:
        from transformers.tokenization_utils_base import PreTrainedTokenizerBase
        from transformers.tokenization_utils_tokenizers import TokenizersBackend
    except ImportError:  # another transformers layout: its own batch_decode
        return False
    return (issubclass(cls, TokenizersBackend) and cls._decode is TokenizersBackend._decode
            and cls.decode is PreTrainedTokenizerBase.decode
            and cls.batch_decode is PreTrainedTokenizerBase.batch_decode)


#: gpt-oss (harmony) channel format: the answer is the text after the last final-channel header, up to the next
#: marker ("<|return|>", "<|end|>")
HARMONY_FINAL = "<|channel|>final<|message|>"
MARKER_START = "<|"


def channel_marker(tokenizer) -> str | None:
    """The final-channel header when the tokenizer speaks a channel format (its vocabulary has "<|channel|>"),
    else None."""
    try:  # one lookup, not the whole vocabulary (get_vocab builds a dict of it: ~20 ms a call)
        token_id = tokenizer.convert_tokens_to_ids("<|channel|>")
    except (AttributeError, NotImplementedError, KeyError):
        return None
    found = token_id is not None and token_id != getattr(tokenizer, "unk_token_id", None)
    return HARMONY_FINAL if found else None


@dataclass(frozen=True)
class AnswerParser:
    """Parse generated text into an option (see the module docstring).

    Parameters
    ----------
    options : the accepted answers (case-insensitive, trimmed).
    closing : the one character that ends the answer.
    lead : text the model must write before the answer because the prompt could not carry it (the prefill of a
        chat template that rejects an assistant prefill): matched ignoring whitespace, then the answer follows.
    final_marker : channel formats (gpt-oss): only the text after the last occurrence of this header counts, up to
        the next "<|" marker; before the header appears the generation is still live (invalid once it ends).
    """

    options: tuple[str, ...]
    closing: str = "'"
    lead: str = ""
    final_marker: str | None = None

    def __post_init__(self) -> None:
        if len(self.closing) != 1:
            raise DataError(f"the closing quote must be one character, got {self.closing!r}")
        lowered = [o.strip().casefold() for o in self.options]
        if len(set(lowered)) != len(lowered) or not all(lowered):
            raise DataError(f"options must be distinct and non-empty ignoring case: {self.options}")

    def _strip(self, text: str) -> tuple[str, str]:
        """("done", answer part) when the final channel and the lead are complete; ("partial", text) while they may
        still come; ("wrong", text) when they cannot."""
        if self.final_marker is not None:
            at = text.rfind(self.final_marker)
            if at < 0:
                return "partial", text
            text = text[at + len(self.final_marker):]
            if MARKER_START in text:
                text = text.split(MARKER_START, 1)[0] + self.closing  # a marker ends the message
        if not self.lead:
            return "done", text
        want = "".join(self.lead.split())
        j = 0
        for i, char in enumerate(text):
            if j == len(want):
                return "done", text[i:]
            if char.isspace():
                continue
            if char != want[j]:
                return "wrong", text
            j += 1
        return ("done", "") if j == len(want) else ("partial", text)

    def parse(self, text: str) -> tuple[str, str | None]:
        """(answer text, the matching option or None)."""
        state, text = self._strip(text)
        if state != "done":
            return text.strip(), None
        answer = text.split(self.closing, 1)[0].strip()
        for option in self.options:
            if answer.casefold() == option.strip().casefold():
                return answer, option
        return answer, None

    def status(self, text: str, ended: bool) -> tuple[Status, str | None]:
        """Outcome of a partial generation: decided (valid with its option, or invalid) or still live.

        Decided when the closing quote has appeared or generation ended (stop token or token limit); otherwise
        live while some continuation could still parse to a valid option.
        """
        state, rest = self._strip(text)
        if state == "wrong" or (state == "partial" and ended):
            return "invalid", None
        if state == "partial":
            return "live", None
        if ended or self.closing in rest:
            _, option = self.parse(text)
            return ("valid", option) if option is not None else ("invalid", None)
        text = rest
        if text.endswith("\ufffd"):  # a multi-byte character split across tokens: the next token may complete it
            return "live", None
        partial = text.lstrip().casefold()
        for option in self.options:
            target = option.strip().casefold()
            if target.startswith(partial):
                return "live", None
            if partial.startswith(target) and partial[len(target):].strip() == "":
                return "live", None
        return "invalid", None

    def first_token(self, text: str) -> str:
        """What a reply that begins with `text` answers, as far as `text` decides it (choice logprobs mode, where
        only the first answer token's alternatives are known): the option when `text` is consistent with exactly
        one option (a prefix of it, or all of it with the closing quote), "invalid" when with none, and
        "unresolved" when the lead is not written yet, nothing of the answer is, or several options remain.
        """
        state, rest = self._strip(text)
        if state == "wrong":
            return "invalid"
        if state == "partial":
            return "unresolved"
        status, option = self.status(text, ended=False)
        if status == "valid":
            return option
        if status == "invalid":
            return "invalid"
        partial = rest.lstrip().casefold()
        if not partial.strip():
            return "unresolved"
        alive = [o for o in self.options if o.strip().casefold().startswith(partial.rstrip())
                 or (partial.startswith(o.strip().casefold()) and partial[len(o.strip()):].strip() == "")]
        return alive[0] if len(alive) == 1 else "unresolved"
