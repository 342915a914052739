"""Tests for attention_course.gpt (chapter 11): the byte-level BPE tokenizer, the
decoder-only model and its training pieces, and the chapter's experiment helpers."""

from __future__ import annotations

import math
import re

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from module_helpers import seeded

from attention_course.decoding import KVCache
from attention_course.experiments import gpt as experiment
from attention_course.gpt import (
    CHUNK,
    GPT,
    Block,
    BPETokenizer,
    GPTConfig,
    RMSNorm,
    SwiGLU,
    autocast_dtype,
    lm_loss,
    make_optimizer,
    perplexity,
    warmup_cosine,
)
from attention_course.multihead import share_kv_heads

PROPERTY = settings(max_examples=40, deadline=None)
TEXT = ("def greet(name):\n    return 'hello, ' + name\n\n"
        "class Greeter:\n    def __init__(self, name):\n        self.name = name\n") * 8


@pytest.fixture(scope="module")
def tokenizer() -> BPETokenizer:
    return BPETokenizer.train(TEXT, 300)


# ---------------------------------------------------------------- tokenizer

ROUND_TRIP = BPETokenizer.train(TEXT, 290)


@PROPERTY
@given(st.text())
def test_any_string_round_trips(text):
    tok = ROUND_TRIP
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert all(0 <= i < tok.vocab_size for i in ids)


@PROPERTY
@given(st.text())
def test_the_chunks_cover_every_character(text):
    assert "".join(CHUNK.findall(text)) == text


def test_lone_surrogates_and_other_scripts_round_trip(tokenizer):
    for text in ["\ud800x", "中文 注意力", "tab\tand\r\nnewlines  ", "", "é" * 5, "🙂"]:
        assert tokenizer.decode(tokenizer.encode(text)) == text


def test_merges_are_the_most_frequent_pairs(tokenizer):
    """The first merge is the most frequent adjacent byte pair within the chunks."""
    counts: dict = {}
    for chunk in CHUNK.findall(TEXT):
        data = chunk.encode()
        for pair in zip(data, data[1:], strict=False):
            counts[pair] = counts.get(pair, 0) + 1
    best = max(counts.values())
    first = next(iter(tokenizer.merges))
    assert counts[first] == best
    assert tokenizer.vocab[256] == bytes(first)


def test_training_asks_for_at_least_the_bytes_and_stops_when_nothing_is_left():
    with pytest.raises(ValueError, match="at least 256"):
        BPETokenizer.train("abc", 100)
    tok = BPETokenizer.train("abab", 1000)
    assert tok.vocab_size < 1000 and tok.encode("abab") == [tok.vocab_size - 1]
    assert BPETokenizer.train("", 300).vocab_size == 256


def test_merges_shorten_text_and_never_cross_chunks(tokenizer):
    """A chunk never holds a character then whitespace, so no token does either."""
    assert len(tokenizer.encode(TEXT)) < len(TEXT.encode()) / 2
    pieces = [piece.decode("utf-8", "replace") for piece in tokenizer.vocab[256:]]
    assert not [p for p in pieces if re.search(r"\S\s", p)]
    assert "self" in pieces and " name" in pieces


def test_training_is_deterministic():
    a, b = BPETokenizer.train(TEXT, 280), BPETokenizer.train(TEXT, 280)
    assert a.merges == b.merges


def test_decode_of_a_cut_character_does_not_raise(tokenizer):
    ids = list("é".encode())[:1]
    assert tokenizer.decode(ids) == "\ufffd"


# ---------------------------------------------------------------- the model

def _model(seed=0, **kw) -> GPT:
    torch.manual_seed(seed)
    config = dict(vocab_size=61, d_model=32, num_heads=4, num_kv_heads=2, num_layers=2,
                  max_len=32)
    config.update(kw)
    return GPT(GPTConfig(**config)).eval()


def test_config_defaults():
    config = GPTConfig(vocab_size=100, d_model=48, num_heads=6, num_kv_heads=None,
                       num_layers=1, max_len=16)
    assert config.num_kv_heads == 6 and config.d_ff == 128  # 8/3 * 48 = 128
    assert GPTConfig(100, 30, 3, 1, 2, 8).d_ff == 80


def test_rms_norm_by_hand():
    norm = RMSNorm(5, eps=1e-6)
    with torch.no_grad():
        norm.weight.copy_(torch.arange(1.0, 6.0))
    x = torch.randn(2, 3, 5, dtype=torch.float64)
    expected = x / (x.pow(2).mean(-1, keepdim=True) + 1e-6).sqrt() * torch.arange(1.0, 6.0)
    torch.testing.assert_close(norm(x.float()).double(), expected, rtol=1e-5, atol=1e-6)
    half = norm(x.bfloat16())
    assert half.dtype == torch.bfloat16


def test_swiglu_by_hand():
    torch.manual_seed(0)
    ffn = SwiGLU(6, 10)
    x = torch.randn(4, 6)
    gate = x @ ffn.w1.weight.T
    expected = (gate * torch.sigmoid(gate) * (x @ ffn.w3.weight.T)) @ ffn.w2.weight.T
    torch.testing.assert_close(ffn(x), expected)
    assert all(layer.bias is None for layer in (ffn.w1, ffn.w2, ffn.w3))


@pytest.mark.parametrize("num_kv_heads", [1, 2, 4])
def test_block_is_pre_norm_rope_gqa_by_hand(num_kv_heads):
    """A block computed step by step from its weights: RMSNorm, RoPE on grouped heads,
    causal softmax attention, residual, RMSNorm, SwiGLU, residual."""
    from attention_course.positions import rotary_embedding

    torch.manual_seed(1)
    config = GPTConfig(50, 32, 4, num_kv_heads, 1, 16)
    block = Block(config).eval()
    x = torch.randn(2, 7, 32)
    attn = block.attn
    y = block.attn_norm(x)
    q = (y @ attn.q_proj.weight.T).view(2, 7, 4, 8).transpose(1, 2)
    k = (y @ attn.k_proj.weight.T).view(2, 7, num_kv_heads, 8).transpose(1, 2)
    v = (y @ attn.v_proj.weight.T).view(2, 7, num_kv_heads, 8).transpose(1, 2)
    q, k = rotary_embedding(q), rotary_embedding(k)
    k, v = share_kv_heads(k, v, 4)
    scores = q @ k.transpose(-1, -2) / math.sqrt(8)
    scores = scores.masked_fill(~torch.ones(7, 7, dtype=torch.bool).tril(), -math.inf)
    h = x + (scores.softmax(-1) @ v).transpose(1, 2).reshape(2, 7, 32) @ attn.out_proj.weight.T
    expected = h + block.ffn(block.ffn_norm(h))
    out, weights = block(x)
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-5)
    assert weights is None
    _, weights = block(x, need_weights=True)
    torch.testing.assert_close(weights, scores.softmax(-1), rtol=1e-4, atol=1e-6)


def test_forward_shape_causality_and_tied_weights():
    model = _model()
    ids = torch.randint(0, 61, (3, 9))
    logits = model(ids)
    assert logits.shape == (3, 9, 61)
    changed = ids.clone()
    changed[:, 5] = (changed[:, 5] + 1) % 61
    after = model(changed)
    torch.testing.assert_close(after[:, :5], logits[:, :5])
    assert not torch.allclose(after[:, 5:], logits[:, 5:])
    assert model.head.weight is model.embed.weight
    untied = _model(tie_embeddings=False)
    assert untied.head.weight is not untied.embed.weight


def test_attention_weights_are_causal_rows_of_one():
    model = _model()
    weights = model.attention_weights(torch.randint(0, 61, (2, 8)))
    assert len(weights) == 2 and weights[0].shape == (2, 4, 8, 8)
    for w in weights:
        torch.testing.assert_close(w.sum(-1), torch.ones(2, 4, 8))
        assert (w.triu(1) == 0).all()


@pytest.mark.parametrize("num_kv_heads", [1, 2, 4])
def test_cached_logits_match_the_full_pass(num_kv_heads):
    model = _model(num_kv_heads=num_kv_heads)
    ids = torch.randint(0, 61, (2, 11))
    full = model(ids)
    cache = model.new_cache()
    assert all(isinstance(c, KVCache) for c in cache)
    parts = [model(ids[:, :4], cache), model(ids[:, 4:5], cache), model(ids[:, 5:], cache)]
    torch.testing.assert_close(torch.cat(parts, 1), full, rtol=1e-4, atol=1e-5)
    assert len(cache[0]) == 11 and cache[0].keys.shape[1] == num_kv_heads


def test_generate_greedy_is_the_same_with_and_without_the_cache():
    model = _model(seed=3)
    prompt = torch.randint(0, 61, (3, 5))
    cached = model.generate(prompt, 20)
    uncached = model.generate(prompt, 20, temperature=0.0, use_cache=False)
    assert torch.equal(cached, uncached) and cached.shape == (3, 25)
    assert torch.equal(cached[:, :5], prompt)
    assert torch.equal(model.generate(prompt, 0), prompt)
    # greedy: each new token is the argmax of the model's logits on what came before
    logits = model(cached[:, :-1])
    assert torch.equal(logits[:, 4:].argmax(-1), cached[:, 5:])


def test_generate_runs_past_max_len_and_keeps_the_training_mode():
    model = _model(max_len=8).train()
    prompt = torch.randint(0, 61, (1, 6))
    out = model.generate(prompt, 10)
    assert out.shape == (1, 16) and model.training
    assert torch.equal(out, model.generate(prompt, 10, use_cache=False))


def test_sampling_follows_the_generator_and_top_k():
    model = _model(seed=4)
    prompt = torch.randint(0, 61, (4, 3))
    draws = [model.generate(prompt, 12, temperature=1.0,
                            generator=seeded(9)) for _ in range(2)]
    assert torch.equal(*draws)
    top1 = model.generate(prompt, 12, temperature=1.0, top_k=1,
                          generator=seeded(1))
    assert torch.equal(top1, model.generate(prompt, 12))
    nucleus = model.generate(prompt, 12, temperature=0.7, top_p=1e-6,
                             generator=seeded(2))
    assert torch.equal(nucleus, top1)


# ---------------------------------------------------------------- training pieces

def test_lm_loss_is_next_token_cross_entropy():
    model = _model()
    batch = torch.randint(0, 61, (2, 10))
    expected = F.cross_entropy(model(batch[:, :-1]).reshape(-1, 61), batch[:, 1:].reshape(-1))
    torch.testing.assert_close(lm_loss(model, batch), expected)
    assert perplexity(model, [batch]) == pytest.approx(math.exp(expected.item()), rel=1e-5)
    # an untrained model is about as unsure as a uniform choice among 61 tokens
    assert 30 < perplexity(model, [batch]) < 120


def test_autocast_only_where_bfloat16_is_fast():
    assert autocast_dtype("cpu") is None
    if torch.cuda.is_available():
        native = torch.cuda.is_bf16_supported(including_emulation=False)
        assert autocast_dtype("cuda") == (torch.bfloat16 if native else None)


def test_autocast_refuses_emulated_bfloat16(monkeypatch):
    # a pre-Ampere GPU: bfloat16 only emulated, which is_bf16_supported
    # counts by default
    def supported(including_emulation=True):
        return including_emulation
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", supported)
    assert autocast_dtype("cuda") is None


def test_optimizer_decays_matrices_only():
    model = _model()
    optimizer = make_optimizer(model, 1e-3, weight_decay=0.2)
    decayed, plain = optimizer.param_groups
    assert decayed["weight_decay"] == 0.2 and plain["weight_decay"] == 0.0
    assert all(p.dim() == 2 for p in decayed["params"])
    assert all(p.dim() == 1 for p in plain["params"])
    count = sum(p.numel() for group in optimizer.param_groups for p in group["params"])
    assert count == sum(p.numel() for p in model.parameters())
    assert isinstance(optimizer, torch.optim.AdamW)


def test_warmup_then_cosine():
    factors = [warmup_cosine(s, 10, 110, floor=0.1) for s in range(120)]
    assert factors[0] == pytest.approx(0.1) and factors[9] == pytest.approx(1.0)
    assert all(a < b for a, b in zip(factors[:9], factors[1:10], strict=True))
    assert factors[60] == pytest.approx(0.55)
    assert all(a >= b for a, b in zip(factors[10:110], factors[11:111], strict=True))
    assert factors[110] == factors[119] == pytest.approx(0.1)


def test_a_few_steps_learn_a_repeating_text():
    torch.manual_seed(0)
    model = GPT(GPTConfig(20, 32, 4, 2, 2, 32))
    optimizer = make_optimizer(model, 1e-2)
    data = torch.arange(20).repeat(4)[None, :33].repeat(8, 1)
    before = lm_loss(model, data).item()
    for _ in range(60):
        loss = lm_loss(model, data)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert loss.item() < before / 5


# ---------------------------------------------------------------- the experiment's helpers

def test_corpus_is_split_by_file_and_deterministic():
    corpus = experiment.load_corpus(train_bytes=60_000, val_bytes=20_000)
    again = experiment.load_corpus(train_bytes=60_000, val_bytes=20_000)
    assert corpus == again
    assert not set(corpus.train_files) & set(corpus.val_files)
    assert all(name.endswith(".py") and "test" not in name.split("/")[:-1]
               for name in corpus.train_files + corpus.val_files)
    assert len(corpus.train.encode()) >= 60_000 and len(corpus.val.encode()) >= 20_000
    files = experiment.stdlib_files()
    assert files.index(experiment.Path(corpus.val_files[0])) % 10 == 9


def test_ngram_baselines_by_hand():
    tok = BPETokenizer.train("", 256)
    data = experiment.TokenData(tok, torch.tensor([1, 2, 1, 2, 1, 3]), torch.tensor([1, 2, 1]))
    windows = data.windows("val", 2)
    assert windows.tolist() == [[1, 2, 1]]
    got = experiment.ngram_perplexities(data, windows, mix=(0.5,))
    unigram = (torch.bincount(data.train, minlength=256).double() + 1) / (6 + 256)
    assert got["unigram"] == pytest.approx(float(1 / unigram[[2, 1]].prod().sqrt()))
    bigram = torch.tensor([2 / 3, 1.0], dtype=torch.float64)  # p(2 | 1), p(1 | 2)
    mixed = 0.5 * bigram + 0.5 * unigram[[2, 1]]
    assert got["bigram"] == pytest.approx(float(1 / mixed.prod().sqrt()))


def test_windows_are_consecutive_and_cover_the_split():
    tok = BPETokenizer.train("", 256)
    data = experiment.TokenData(tok, torch.arange(20), torch.arange(11))
    assert data.windows("val", 5).tolist() == [[0, 1, 2, 3, 4, 5], [5, 6, 7, 8, 9, 10]]
    assert data.windows("train", 4, count=2).shape == (2, 5)
    batch = next(experiment.random_batches(data.train, 3, 4, seeded(0)))
    assert batch.shape == (3, 5) and bool((batch.diff(dim=1) == 1).all())


def test_bracket_pairs_follow_pythons_tokenizer():
    text = 'f(a(b), "(")  # )\nx = [1, {2: 3}]\n'
    tok = BPETokenizer.train(text * 3, 260)
    ids = tok.encode(text)
    pieces = [tok.decode([i]) for i in ids]
    pairs = experiment.bracket_pairs(text, ids, tok)
    opened = {"(": ")", "[": "]", "{": "}"}
    assert len(pairs) == 4  # the bracket in the string and the one in the comment do not count
    for closing, opening in pairs:
        assert closing >= opening
        assert any(pieces[closing].count(v) for v in opened.values())
        assert any(pieces[opening].count(k) for k in opened)


def test_bracket_scores_on_a_model_count_pairs_and_nesting():
    torch.manual_seed(0)
    text = "def f(a, b):\n    return g(h(a), b) + k(a)\n" * 12
    tok = BPETokenizer.train(text, 280)
    model = GPT(GPTConfig(tok.vocab_size, 16, 2, 1, 2, 32)).eval()
    scores = experiment.bracket_scores(model, text, tok, 32, windows=8, batch_size=3)
    assert scores.match.shape == (2, 2) and scores.pairs > 0 and scores.nested > 0
    assert bool(((scores.match >= 0) & (scores.match <= 1)).all())


def test_width_sweep_trains_every_width_and_seed():
    tok = BPETokenizer.train(TEXT, 270)
    ids = torch.tensor(tok.encode(TEXT))
    data = experiment.TokenData(tok, ids, ids[:200])
    base = GPTConfig(tok.vocab_size, 16, 2, 1, 1, 16)
    setup = experiment.TrainSetup(steps=3, batch_size=2, length=16, warmup=1, eval_every=3,
                                  eval_windows=2)
    runs = experiment.width_sweep(data, base, [8, 16], setup, [0, 1])
    assert [(r.width, r.seed) for r in runs] == [(8, 0), (8, 1), (16, 0), (16, 1)]
    assert runs[0].weights < runs[2].weights and all(math.isfinite(r.val_loss) for r in runs)


def test_files_are_cut_to_their_first_lines():
    corpus = experiment.load_corpus(train_bytes=20_000, val_bytes=10_000, file_bytes=3_000)
    for name in corpus.train_files[:3]:
        assert name.endswith(".py")
    chunks = corpus.train.split("\n")
    assert len(corpus.train.encode()) <= 3_000 * len(corpus.train_files) + len(chunks)


def test_head_scores_on_made_up_weights():
    n = 6
    previous = torch.zeros(1, 1, 2 * n, 2 * n)
    previous[0, 0, 0, 0] = 1
    previous[0, 0, torch.arange(1, 2 * n), torch.arange(2 * n - 1)] = 1
    induction = torch.eye(2 * n)[None, None].clone()
    t = torch.arange(n, 2 * n)
    induction[0, 0, t] = 0
    induction[0, 0, t, t - n + 1] = 1
    weights = [torch.cat([previous, induction], dim=1)]
    torch.testing.assert_close(experiment.previous_token_scores(weights),
                               torch.tensor([[1.0, 0.0]]))
    torch.testing.assert_close(experiment.prefix_matching_scores(weights, n),
                               torch.tensor([[0.0, 1.0]]))
