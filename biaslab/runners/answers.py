"""The forced-choice answer parser, shared by sample mode and exact mode so both count the same event.

Parsing (DESIGN.md section 6): the generated text after the prefill is read up to the closing quote (one character;
or to the end of generation when no quote comes); the answer is valid when, trimmed, it equals one of the options
ignoring case (Unicode case folding). A partial text ending in U+FFFD (a multi-byte character split across tokens)
stays live in exact mode until generation ends.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Status = Literal["valid", "invalid", "live"]


def decode(tokenizer, token_ids) -> str:
    """Generated token ids to text, exactly as the parser sees them (special tokens dropped)."""
    return tokenizer.decode(list(token_ids), skip_special_tokens=True, clean_up_tokenization_spaces=False)


def decode_many(tokenizer, sequences) -> list[str]:
    """`decode` of each sequence, in one call to the tokenizer (the same texts, far less Python per sequence)."""
    return tokenizer.batch_decode([list(s) for s in sequences], skip_special_tokens=True,
                                  clean_up_tokenization_spaces=False)


@dataclass(frozen=True)
class AnswerParser:
    options: tuple[str, ...]
    closing: str = "'"

    def __post_init__(self) -> None:
        if len(self.closing) != 1:
            raise ValueError(f"the closing quote must be one character, got {self.closing!r}")
        lowered = [o.strip().casefold() for o in self.options]
        if len(set(lowered)) != len(lowered) or not all(lowered):
            raise ValueError(f"options must be distinct and non-empty ignoring case: {self.options}")

    def parse(self, text: str) -> tuple[str, str | None]:
        """(answer text, the matching option or None)."""
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
        if ended or self.closing in text:
            _, option = self.parse(text)
            return ("valid", option) if option is not None else ("invalid", None)
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
