"""Chapter 9's experiment: translators with fewer key/value heads.

:func:`kv_heads_experiment` trains chapter 6's Transformer with several numbers
of key/value heads (multi-head, grouped-query, multi-query attention) and seeds;
:func:`translate` runs a trained one greedily or with chapter 9's beam search.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor
from tqdm.auto import tqdm

from attention_course.decoding import beam_search, sequence_log_probs
from attention_course.training import train_with_validation
from attention_course.transformer import Transformer, translation_loss


@dataclass(frozen=True)
class KVHeadsSetup:
    """The translators of chapter 9's key/value-heads experiment: chapter 6's
    Transformer, narrower heads, one layer each side, a short training."""

    d_model: int = 64
    num_heads: int = 8
    num_layers: int = 1
    steps: int = 250
    batch_size: int = 64
    lr: float = 3e-3
    eval_every: int = 50
    max_len: int = 32


class KVHeadsRun(NamedTuple):
    """One trained translator: its ``model`` and its validation ``curves``
    (``{"step", "val_loss", "val_token_accuracy"}``, lists)."""

    num_kv_heads: int
    seed: int
    model: Any
    curves: dict[str, list[float]]


def train_translator(corpus, setup: KVHeadsSetup, num_kv_heads: int,
                     seed: int, device=None,
                     progress: bool = True) -> KVHeadsRun:
    """Train a Transformer with ``num_kv_heads`` key/value heads on
    ``corpus`` (a :class:`~attention_course.data.translation.
    TranslationCorpus`), validating every ``setup.eval_every`` steps on its
    validation split (teacher-forced loss and next-token accuracy)."""
    torch.manual_seed(seed)
    tgt_vocab = corpus.tgt_vocab
    model = Transformer(len(corpus.src_vocab), len(tgt_vocab), setup.d_model,
                        setup.num_heads, setup.num_layers, 2 * setup.d_model,
                        pad_id=tgt_vocab.pad_id, max_len=setup.max_len,
                        num_kv_heads=num_kv_heads)
    device = next(model.parameters()).device if device is None else device
    val = corpus.collate(corpus.val)
    src, tgt_in, tgt_out = (t.to(device)
                            for t in (val.src, val.tgt_in, val.tgt_out))
    real = tgt_out != tgt_vocab.pad_id

    def validate(model) -> dict[str, float]:
        logits = model(src, tgt_in)
        loss = F.cross_entropy(logits.flatten(0, 1), tgt_out.flatten(),
                               ignore_index=tgt_vocab.pad_id)
        right = (logits.argmax(-1) == tgt_out) & real
        return {"val_loss": loss.item(),
                "val_token_accuracy": (right.sum() / real.sum()).item()}

    optimizer = torch.optim.Adam(model.parameters(), lr=setup.lr,
                                 betas=(0.9, 0.98))
    curves = train_with_validation(
        model, translation_loss,
        corpus.loader("train", batch_size=setup.batch_size, seed=seed),
        validate, max_steps=setup.steps, eval_every=setup.eval_every,
        optimizer=optimizer, device=device, progress=progress,
        desc=f"{num_kv_heads} KV heads, seed {seed}")
    return KVHeadsRun(num_kv_heads, seed, model.eval(),
                      {"step": curves.steps, **curves.val})


def kv_heads_experiment(corpus, setup: KVHeadsSetup,
                        kv_heads: Sequence[int], seeds: Sequence[int],
                        device=None) -> dict[int, list[KVHeadsRun]]:
    """:func:`train_translator` for every number of key/value heads and
    seed, with one progress bar: ``{num_kv_heads: [run per seed]}``."""
    runs: dict[int, list[KVHeadsRun]] = {h: [] for h in kv_heads}
    jobs = [(h, s) for h in kv_heads for s in seeds]
    for h, s in tqdm(jobs, desc="translators"):
        runs[h].append(train_translator(corpus, setup, h, s, device,
                                        progress=False))
    return runs


@torch.no_grad()
def translate(model, corpus, pairs: Sequence, beam_size: int = 1,
              length_penalty: float = 0.0, max_len: int = 25,
              batch_size: int = 500) -> tuple[list[list[str]], Tensor]:
    """Translate the source sides of ``pairs`` (``(src words, tgt words)``)
    greedily (``beam_size=1``) or with :func:`beam_search`.

    Returns the translations (lists of words) and the summed log-probability
    the model gives each, float ``(len(pairs),)``
    (:func:`sequence_log_probs`).
    """
    tgt_vocab = corpus.tgt_vocab
    device = next(model.parameters()).device
    words: list[list[str]] = []
    log_probs = []
    for start in range(0, len(pairs), batch_size):
        src = corpus.collate(pairs[start:start + batch_size]).src.to(device)
        if beam_size == 1:
            ids = model.greedy_decode(src, tgt_vocab.bos_id,
                                      tgt_vocab.eos_id, max_len)
        else:
            ids, _ = beam_search(model, src, tgt_vocab.bos_id,
                                 tgt_vocab.eos_id, beam_size, max_len,
                                 length_penalty)
        words += [tgt_vocab.decode(row) for row in ids]
        log_probs.append(sequence_log_probs(model, src, ids,
                                            tgt_vocab.bos_id).cpu())
    return words, torch.cat(log_probs)
