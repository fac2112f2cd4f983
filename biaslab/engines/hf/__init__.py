"""The Hugging Face engine (`--backend hf`, the default): in-process transformers behind the `Backend` interface
(`backend`), with its model loading (`loading`), key/value caches (`kvcache`), scoring (`scoring`,
`prefix_scoring`), sampling (`sampling`), trie levels as tree attention (`tree`) and batching (`batching`)."""

from .backend import CAPABILITIES, FLAGS, NAME, Options, installed, prepare, validate_options

__all__ = ["CAPABILITIES", "FLAGS", "NAME", "Options", "installed", "prepare", "validate_options"]
