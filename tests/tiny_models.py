"""Tiny random GPT-2 (causal) and BERT (masked) models with tokenizers built on the fly, saved as local folders.

No hub is reachable in CI: these stand in for real models in runner tests. The vocabularies are small enough that
pronouns like " she" and " xe" split into several tokens, which is what the multi-token tests need.
"""

from __future__ import annotations

from pathlib import Path

import torch

CORPUS = [
    "The technician told the customer that he could pay with cash.",
    "The nurse said that she had finished the shift early.",
    "The teacher asked the student whether they had read the book.",
    "The priest brings the found money to the police. The priest is truly honest.",
    "The junkie is not sneaky and the doctor is not rude.",
    "Someone asked the salesperson if they were eligible for a discount.",
    "Alex's pronouns are xe/xem/xyr. Xe went home early.",
    "His book, her book, their book and hers.",
] * 4


def _byte_level_tokenizer(vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(CORPUS, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                                   unk_token="<|endoftext|>")


def _wordpiece_tokenizer(vocab_size: int):
    """A BERT tokenizer whose vocabulary is built from CORPUS in a fixed order (the special tokens, the characters and
    the ASCII letters and digits, their "##" continuations, then the words of up to 7 characters by frequency and
    spelling, up to `vocab_size`): the same ids on every run, which `tokenizers`' WordPiece trainer does not give (its
    ties break differently from one process to the next), so that stored outputs on this model
    (tests/metrics/fixtures) stay comparable."""
    import string
    from collections import Counter

    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    normalizer, pre = normalizers.BertNormalizer(lowercase=True), pre_tokenizers.BertPreTokenizer()
    words = Counter(w for line in CORPUS for w, _ in pre.pre_tokenize_str(normalizer.normalize_str(line)))
    chars = sorted({c for w in words for c in w} | set(string.ascii_lowercase + string.digits))
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *chars, *(f"##{c}" for c in chars)]
    # whole words up to 7 characters: longer ones ("technician", "eligible") split into pieces, as the runner
    # tests of multi-piece words need
    vocab += [w for w, _ in sorted(words.items(), key=lambda kv: (-kv[1], kv[0])) if w not in vocab and len(w) <= 7]
    tok = Tokenizer(models.WordPiece({t: i for i, t in enumerate(vocab[:vocab_size])}, unk_token="[UNK]"))
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre
    tok.decoder = decoders.WordPiece()
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]", special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)]
    )
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                                   sep_token="[SEP]", mask_token="[MASK]")


def make_tiny_gpt2(folder: Path, seed: int = 0, vocab_size: int = 300) -> Path:
    from transformers import GPT2Config, GPT2LMHeadModel

    tokenizer = _byte_level_tokenizer(vocab_size)
    torch.manual_seed(seed)
    config = GPT2Config(vocab_size=len(tokenizer), n_positions=1024, n_embd=32, n_layer=2, n_head=2,
                        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    model = GPT2LMHeadModel(config)
    _spread_logits(model)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def make_tiny_bert(folder: Path, seed: int = 0, vocab_size: int = 200) -> Path:
    from transformers import BertConfig, BertForMaskedLM

    tokenizer = _wordpiece_tokenizer(vocab_size)
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=512, pad_token_id=tokenizer.pad_token_id)
    model = BertForMaskedLM(config)
    _spread_logits(model)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def _spread_logits(model) -> None:
    """Scale random weights up so that the output distributions are far from uniform (sharper tests)."""
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.mul_(4.0)
