"""Scores of translations and summaries of runs, shared by the chapters that
translate (4, 6, 8 and 9).

- :func:`corpus_bleu` (Papineni et al. 2002): the geometric mean of clipped
  n-gram precisions (:func:`modified_precision`) times a brevity penalty;
  :func:`sentence_bleu` for one sentence.
- :func:`exact_match`: the share of translations equal to their reference;
  :func:`edit_distance`: the Levenshtein distance over words.
- :func:`scores_by_length`: exact match and BLEU per source-length bucket,
  printed by :func:`format_table`; :func:`mean_std` and
  :func:`format_over_seeds` sum up several runs (seeds).

Sentences are lists of tokens; a corpus is a sequence of them, one reference
per candidate.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence


def ngram_counts(tokens: Sequence[str], n: int) -> Counter[tuple[str, ...]]:
    """How often each ``n``-gram occurs in ``tokens``."""
    return Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))


def modified_precision(
    candidate: Sequence[str], reference: Sequence[str], n: int
) -> tuple[int, int]:
    """``(clipped matches, candidate n-grams)``: each candidate ``n``-gram
    counts at most as often as it occurs in the reference
    (Papineni et al. 2002)."""
    cand, ref = ngram_counts(candidate, n), ngram_counts(reference, n)
    clipped = sum(min(count, ref[gram]) for gram, count in cand.items())
    return clipped, sum(cand.values())


def corpus_bleu(
    candidates: Sequence[Sequence[str]],
    references: Sequence[Sequence[str]],
    max_n: int = 4,
) -> float:
    """Corpus BLEU with one reference per sentence, in ``[0, 1]``.

    ``BP * exp(mean_n log p_n)`` for ``n = 1..max_n``, where ``p_n`` sums
    clipped ``n``-gram matches and candidate ``n``-grams over the whole corpus,
    and the brevity penalty is ``BP = exp(min(0, 1 - r / c))`` for total
    reference length ``r`` and total candidate length ``c``. Without smoothing:
    if some ``p_n`` is 0 the score is 0.
    """
    if len(candidates) != len(references):
        raise ValueError(
            f"need as many candidates as references, got {len(candidates)} "
            f"and {len(references)}"
        )
    if max_n < 1:
        raise ValueError(f"max_n must be at least 1, got {max_n}")
    log_precision = 0.0
    for n in range(1, max_n + 1):
        matches = total = 0
        for cand, ref in zip(candidates, references, strict=True):
            m, t = modified_precision(cand, ref, n)
            matches, total = matches + m, total + t
        if matches == 0:
            return 0.0
        log_precision += math.log(matches / total) / max_n
    c = sum(len(cand) for cand in candidates)
    r = sum(len(ref) for ref in references)
    return math.exp(min(0.0, 1 - r / c) + log_precision)


def sentence_bleu(
    candidate: Sequence[str], reference: Sequence[str], max_n: int = 4
) -> float:
    """BLEU of one sentence: :func:`corpus_bleu` of a one-sentence corpus."""
    return corpus_bleu([candidate], [reference], max_n)


def exact_match(
    candidates: Sequence[Sequence[str]], references: Sequence[Sequence[str]]
) -> float:
    """Fraction of candidates equal to their reference, word for word."""
    if len(candidates) != len(references) or not candidates:
        raise ValueError(
            f"need as many candidates as references (at least one), "
            f"got {len(candidates)} and {len(references)}"
        )
    return sum(
        list(c) == list(r) for c, r in zip(candidates, references, strict=True)
    ) / len(candidates)


def edit_distance(a: Sequence[str], b: Sequence[str]) -> int:
    """The number of words to insert, delete or replace to turn ``a`` into
    ``b`` (Levenshtein distance over words)."""
    previous = list(range(len(b) + 1))
    for i, x in enumerate(a, start=1):
        current = [i]
        for j, y in enumerate(b, start=1):
            current.append(min(previous[j] + 1, current[j - 1] + 1,
                               previous[j - 1] + (x != y)))
        previous = current
    return previous[-1]


def scores_by_length(
    pairs: Sequence[tuple[list[str], list[str]]],
    predictions: Sequence[Sequence[str]],
    buckets: Sequence[tuple[int, int]] = ((3, 6), (7, 10), (11, 14), (15, 20)),
) -> list[dict[str, float | int | str]]:
    """Exact match and BLEU for source-length buckets ``(lo, hi)`` (inclusive),
    then all.

    Returns one dict per row: ``{"length", "n", "exact_match", "bleu"}``.
    """
    if len(pairs) != len(predictions):
        raise ValueError(
            f"got {len(pairs)} pairs but {len(predictions)} predictions"
        )
    rows = []
    named = [(f"{lo}-{hi}", lo, hi) for lo, hi in buckets] + [
        ("all", 0, math.inf)
    ]
    for name, lo, hi in named:
        chosen = [i for i, (src, _) in enumerate(pairs) if lo <= len(src) <= hi]
        if not chosen:
            continue
        refs = [pairs[i][1] for i in chosen]
        preds = [predictions[i] for i in chosen]
        rows.append(
            {
                "length": name,
                "n": len(chosen),
                "exact_match": exact_match(preds, refs),
                "bleu": corpus_bleu(preds, refs),
            }
        )
    return rows


def format_table(
    rows: Sequence[dict[str, float | int | str]], title: str = ""
) -> str:
    """The rows of :func:`scores_by_length` as a small text table."""
    lines = [title] if title else []
    lines.append(
        f"{'source length':>13} {'n':>5} {'exact match':>12} {'BLEU':>6}"
    )
    for row in rows:
        lines.append(
            f"{row['length']:>13} {row['n']:>5} "
            f"{row['exact_match']:>12.1%} {row['bleu']:>6.3f}"
        )
    return "\n".join(lines)


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and (population) standard deviation of a few runs' results."""
    if not values:
        raise ValueError("mean_std needs at least one value, got none")
    mean = sum(values) / len(values)
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


def format_over_seeds(
    tables: dict[str, Sequence[Sequence[dict[str, float | int | str]]]],
    metric: str = "exact_match",
) -> str:
    """Several runs' :func:`scores_by_length` as one text table: a row per
    model, a column per length bucket, each cell ``mean ± std`` of ``metric``
    over the model's runs (exact match in percent, BLEU as a fraction)."""
    first = next(iter(tables.values()))[0]
    buckets = [str(row["length"]) for row in first]
    width = max(len(name) for name in tables)
    lines = [f"{'':<{width}}" + "".join(f"{b:>13}" for b in buckets)]
    for name, runs in tables.items():
        cells = []
        for k, bucket in enumerate(buckets):
            if any(str(run[k]["length"]) != bucket for run in runs):
                raise ValueError(
                    f"the runs of {name!r} have different length buckets"
                )
            mean, std = mean_std([float(run[k][metric]) for run in runs])
            cells.append(f"{100 * mean:.1f} ± {100 * std:.1f}"
                         if metric == "exact_match"
                         else f"{mean:.2f} ± {std:.2f}")
        lines.append(f"{name:<{width}}" + "".join(f"{c:>13}" for c in cells))
    return "\n".join(lines)
