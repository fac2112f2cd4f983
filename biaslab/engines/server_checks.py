"""What an OpenAI-compatible server must do for each protocol, asked before any run row is written.

`--backend openai` sends prompts as token ids and reads ids and log-probabilities back, so a server that runs
fine for chat can still be unusable, or worse, give wrong numbers quietly (llama-cpp-python's server: token-id
prompts refused with HTTP 500, token text instead of ids, echoed log-probabilities shifted by one position). Each
check sends a few requests built from a known sentence (`KNOWN_SENTENCE`, tokenized locally with the model's
tokenizer) and raises `Unsupported` in one line naming what the server lacks:

* every protocol: prompts as token-id lists (a text prompt that works where the id prompt fails tells the two
  apart);
* `score` (prob): echo with log-probabilities, one per prompt token, none for the first, and causal: changing
  only the last token of the sentence leaves every earlier position's value unchanged (within `ECHO_TOLERANCE`
  nats: bf16 and batching noise stay well below it). A server whose values are shifted by one (value i =
  log p(token i+1 | ...)) fails this: its value at the second-last position becomes the log-probability of the
  changed token, which differs by |log p(x | prefix) - log p(y | prefix)| (the sentence's own last token against
  its second token: several nats for a trained model). The check compares the server with
  itself: the client has no weights to run a local forward pass (the served model may not fit here);
* `top_k` (choice exact): top log-probabilities keyed by token id ("token_id:N", vLLM's
  return_tokens_as_token_ids), and the server's K (`probe_top_k`);
* `sample` (choice sample, gen): sampled tokens as ids, and per-request seeds honoured (two requests with the same
  seed return the same tokens).
"""

from __future__ import annotations

from typing import Any

from .base import SAMPLE, SCORE, TOP_K, Unsupported
from .openai_http import MAX_ALLOWED, TOKEN_ID, ServerError, token_id

#: the sentence the checks send (tokenized with the model's own tokenizer)
KNOWN_SENTENCE = "The nurse said that she would be late for the meeting."
#: largest difference (nats) between the echoed log-probabilities of a shared prefix in two requests
ECHO_TOLERANCE = 0.05
#: how many top log-probabilities `probe_top_k` asks for
PROBE_K = 256
#: the seed of the sampling check
PROBE_SEED = 1234


def known_ids(tokenizer: Any, bos_id: int) -> list[int]:
    """The token ids of `KNOWN_SENTENCE` after the BOS id (at least 4 tokens)."""
    ids = [int(bos_id), *tokenizer(KNOWN_SENTENCE, add_special_tokens=False)["input_ids"]]
    if len(ids) < 4:
        raise Unsupported(f"the tokenizer turns {KNOWN_SENTENCE!r} into {len(ids)} tokens; the server checks need 4")
    return ids


class ServerChecks:
    """The checks of one server (`client`: an `openai.Client`; `served`: the served model's name)."""

    def __init__(self, client: Any, served: str, ids: list[int]) -> None:
        self.client, self.served, self.ids = client, served, ids
        self.where = f"the server at {client.base_url}"

    def _refuse(self, what: str, capability: str) -> Unsupported:
        return Unsupported(f"--backend openai: {self.where} {what}; {capability} evidence needs it "
                           f"(tested servers: docs/scaling.md, section 'On a GPU box')")

    def _post(self, **fields: Any) -> dict:
        return self.client.request("POST", "completions", {"model": self.served, **fields})

    def run(self, needs: frozenset[str]) -> int | None:
        """Every check `needs` asks for; returns the server's K when TOP_K is needed, else None."""
        self.token_id_prompts()
        if SCORE in needs:
            self.echo()
        k = self.top_k() if TOP_K in needs else None
        if SAMPLE in needs:
            self.sample()
        return k

    def token_id_prompts(self) -> None:
        """A greedy one-token completion of the known sentence sent as token ids."""
        try:
            self._post(prompt=self.ids, max_tokens=1, temperature=0.0)
        except ServerError as exc:
            try:
                self._post(prompt=KNOWN_SENTENCE, max_tokens=1, temperature=0.0)
            except ServerError:
                raise exc from None  # the server fails on text too: its own error
            raise Unsupported(f"--backend openai: {self.where} does not accept prompts as token-id lists (it "
                              f"answers text prompts; {str(exc)[:160]}); --backend openai sends token ids so that "
                              f"the ids scored are the ids stored") from None

    def _echo(self, ids: list[int]) -> list:
        answer = self._post(prompt=ids, max_tokens=1, temperature=0.0, echo=True, logprobs=1,
                            return_tokens_as_token_ids=True)
        return list(((answer["choices"][0].get("logprobs") or {}).get("token_logprobs")) or [])

    def echo(self) -> None:
        """Echoed prompt log-probabilities: present, none for the first token, and causal (see the module)."""
        ids = self.ids
        first = self._echo(ids)
        if first and first[0] is not None:
            raise self._refuse("echoes a log-probability for the first prompt token, which has nothing before it "
                               "(its echoed values are shifted by one position)", "prob")
        present = sum(v is not None for v in first[1:len(ids)])
        if present < len(ids) - 1:
            raise self._refuse(f"echoes log-probabilities for {present} of the {len(ids) - 1} prompt tokens after "
                               f"the first (echo=true with logprobs)", "prob")
        other = next(t for t in (ids[1], ids[2], 0, 1) if t != ids[-1])
        second = self._echo([*ids[:-1], other])
        gap = max((abs(float(a) - float(b)) for a, b in zip(first[1:len(ids) - 1], second[1:len(ids) - 1])),
                  default=0.0)
        if not gap <= ECHO_TOLERANCE:
            raise self._refuse(f"echoes log-probabilities that change at earlier positions (by {gap:.3g} nats) when "
                               f"only the last prompt token changes: they are not log p(token | the tokens "
                               f"before it) (shifted by one position?)", "prob")

    def top_k(self) -> int:
        """The server's K, with top log-probabilities keyed by token id."""
        k = probe_top_k(self.client, self.served, self.ids[:2])
        if k < 1:
            raise self._refuse("returns no top log-probabilities (logprobs=K)", "choice exact-mode")
        return k

    def sample(self) -> None:
        """Sampled tokens come back as ids, and the same seed gives the same tokens."""
        def draw() -> list:
            answer = self._post(prompt=self.ids, max_tokens=4, temperature=1.0, top_p=1.0, seed=PROBE_SEED,
                                logprobs=1, return_tokens_as_token_ids=True)
            return list(((answer["choices"][0].get("logprobs") or {}).get("tokens")) or [])

        first = draw()
        try:
            [token_id(t) for t in first]
        except Unsupported:
            raise self._refuse(f"returns sampled tokens as text ({first[:1]!r}), not as ids (vLLM's "
                               f"return_tokens_as_token_ids)", "sampling") from None
        if not first:
            raise self._refuse("returns no tokens with their log-probabilities (logprobs=1)", "sampling")
        if draw() != first:
            raise self._refuse(f"returned other tokens for a second request with the same seed ({PROBE_SEED}): "
                               f"per-request seeds are not honoured, so samples would not be reproducible",
                               "sampling")


def probe_top_k(client: Any, served: str, prompt: list[int], want: int = PROBE_K) -> int:
    """The number of top log-probabilities per token the server returns (its K): asked for `want`, the count it
    returns, or the N of its refusal ("... max allowed: N", then asked for N). Top entries keyed by token text
    rather than by id are refused."""
    def ask(k: int) -> dict:
        body = {"model": served, "prompt": prompt, "max_tokens": 1, "temperature": 0.0, "logprobs": k,
                "return_tokens_as_token_ids": True}
        answer = client.request("POST", "completions", body)
        return ((answer["choices"][0].get("logprobs") or {}).get("top_logprobs") or [None])[0] or {}

    try:
        top = ask(want)
    except ServerError as exc:
        match = MAX_ALLOWED.search(str(exc))
        if match is None:
            raise ServerError(f"cannot find the server's top-logprobs limit: {exc}") from None
        want = int(match.group(1))
        top = ask(want) if want > 0 else {}
    text = [t for t in top if not TOKEN_ID.match(t)]
    if text:
        raise Unsupported(f"--backend openai: the server at {client.base_url} keys its top log-probabilities by "
                          f"token text ({text[0]!r}), not by token id (vLLM's return_tokens_as_token_ids); choice "
                          f"exact-mode evidence needs ids")
    return min(want, len(top))
