"""Chapter 4's encoder-decoder models, greedy decoding, BLEU and exact match."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attention_course import metrics
from attention_course import seq2seq as s2s
from attention_course.data.translation import make_translation_corpus
from attention_course.experiments import seq2seq as experiment
from attention_course.scoring import AdditiveScore, BilinearScore
from attention_course.training import train

SRC_V, TGT_V, E, H = 11, 13, 8, 12


def _model(attention: bool | str, seed: int = 0, num_layers: int = 1, **kwargs) -> s2s.Seq2Seq:
    torch.manual_seed(seed)
    return s2s.make_seq2seq(
        SRC_V, TGT_V, attention=attention, embed_dim=E, hidden_dim=H, num_layers=num_layers,
        **kwargs,
    ).eval()


# every decoder with attention: Bahdanau's, and Luong's with each score, with and without
# input feeding
ATTENDING = [
    ("bahdanau", {}),
    *[("luong", {"score": score, "input_feeding": True}) for score in s2s.LUONG_SCORES],
    ("luong", {"score": "general", "input_feeding": False}),
]


def _batch(lens: list[int], seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, SRC_V, (len(lens), max(lens)), generator=g)
    for i, n in enumerate(lens):
        src[i, n:] = 0
    return src, torch.tensor(lens)


# --- the encoder ----------------------------------------------------------------------------


def test_encoder_skips_padding():
    model = _model(attention=True)
    src, lens = _batch([5, 2, 7])
    outputs, state = model.encoder(src, lens)
    assert outputs.shape == (3, 7, H) and state.shape == (1, 3, H)
    for i, n in enumerate(lens.tolist()):
        assert (outputs[i, n:] == 0).all()
        torch.testing.assert_close(state[0, i], outputs[i, n - 1])
        alone, alone_state = model.encoder(src[i : i + 1, :n], lens[i : i + 1])
        torch.testing.assert_close(alone[0], outputs[i, :n])
        torch.testing.assert_close(alone_state[0, 0], state[0, i])


def test_bad_source_raises():
    model = _model(attention=True)
    src, lens = _batch([3, 4])
    with pytest.raises(ValueError, match=r"src must have shape \(B, S\)"):
        model.encoder(src[0], lens)
    with pytest.raises(ValueError, match="src_valid_lens must have shape"):
        model.encoder(src, lens[:1])
    with pytest.raises(ValueError, match=r"lie in \[1, S=4\]"):
        model.encoder(src, torch.tensor([0, 4]))
    with pytest.raises(ValueError, match=r"lie in \[1, S=4\]"):
        model.encoder(src, torch.tensor([5, 4]))
    with pytest.raises(ValueError, match="tgt_in must have shape"):
        model(src, lens, torch.ones(3, 2, dtype=torch.long))


# --- the decoders ---------------------------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(
    lens=st.lists(st.integers(1, 9), min_size=1, max_size=5),
    tgt_len=st.integers(1, 6),
    layers=st.integers(1, 2),
    decoder=st.sampled_from(ATTENDING),
)
def test_attention_weights_mask_padding_and_sum_to_one(lens, tgt_len, layers, decoder):
    model = _model(decoder[0], num_layers=layers, **decoder[1])
    src, valid = _batch(lens)
    tgt_in = torch.randint(0, TGT_V, (len(lens), tgt_len))
    logits, weights = model(src, valid, tgt_in)
    assert logits.shape == (len(lens), tgt_len, TGT_V)
    assert weights.shape == (len(lens), tgt_len, max(lens))
    for i, n in enumerate(lens):
        assert (weights[i, :, n:] == 0).all(), "a padded source position got weight"
        assert (weights[i, :, :n] > 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(len(lens), tgt_len))


@pytest.mark.parametrize(("attention", "kwargs"), [*ATTENDING, (False, {})])
def test_padding_does_not_change_a_translation(attention, kwargs):
    model = _model(attention, **kwargs)
    src, lens = _batch([4, 9])
    tgt_in = torch.randint(0, TGT_V, (2, 5))
    logits, weights = model(src, lens, tgt_in)
    alone, alone_weights = model(src[:1, :4], lens[:1], tgt_in[:1])
    torch.testing.assert_close(alone[0], logits[0])
    if attention:
        torch.testing.assert_close(alone_weights[0], weights[0, :, :4])
    else:
        assert weights is None and alone_weights is None


def test_attention_context_is_the_weighted_sum_of_encoder_states():
    model = _model(attention=True)
    src, lens = _batch([3, 6])
    enc_outputs, _ = model.encoder(src, lens)
    query = torch.randn(2, 1, H)
    context, weights = model.decoder.attend(query, enc_outputs, lens)
    scores = model.decoder.attention_score(query, enc_outputs)
    for i, n in enumerate(lens.tolist()):
        expected = torch.softmax(scores[i, 0, :n], dim=-1)
        torch.testing.assert_close(weights[i, 0, :n], expected)
        torch.testing.assert_close(context[i, 0], expected @ enc_outputs[i, :n])


@pytest.mark.parametrize(("attention", "kwargs"), [*ATTENDING, (False, {})])
def test_step_by_step_decoding_matches_teacher_forcing(attention, kwargs):
    """Greedy decoding one step at a time equals one teacher-forced pass over its own output."""
    model = _model(attention, seed=1, **kwargs)
    src, lens = _batch([6, 3, 8], seed=2)
    decoded = experiment.greedy_decode(model, src, lens, bos_id=1, eos_id=2, max_len=7)
    steps = decoded.ids.shape[1]
    assert decoded.ids.shape[0] == 3 and 1 <= steps <= 7
    tgt_in = torch.cat([torch.ones(3, 1, dtype=torch.long), decoded.ids[:, :-1]], dim=1)
    logits, weights = model(src, lens, tgt_in)
    assert torch.equal(logits.argmax(-1), decoded.ids)
    if attention:
        assert decoded.weights.shape == (3, steps, 8)
        torch.testing.assert_close(decoded.weights, weights)
    else:
        assert decoded.weights is None


def test_greedy_decode_stops_when_every_row_has_ended():
    model = _model(attention=True)
    with torch.no_grad():
        model.decoder.output.bias.fill_(-100.0)
        model.decoder.output.bias[2] = 100.0  # always predict <eos> = 2
    src, lens = _batch([3, 5])
    decoded = experiment.greedy_decode(model, src, lens, bos_id=1, eos_id=2, max_len=10)
    assert decoded.ids.tolist() == [[2], [2]]
    with pytest.raises(ValueError, match="max_len"):
        experiment.greedy_decode(model, src, lens, bos_id=1, eos_id=2, max_len=0)


def test_luong_queries_with_the_current_state_and_feeds_the_attentional_state():
    """Two steps of Luong's decoder by hand: s_t = GRU([e(y); h~_{t-1}], s_{t-1}) first,
    then a_t = softmax(s_t^T W h), c_t = sum_j a_tj h_j, h~_t = tanh(W_c [c_t; s_t]),
    logits = W_s h~_t."""
    model = _model("luong", seed=3, score="general")
    dec = model.decoder
    src, lens = _batch([5, 3], seed=4)
    tgt_in = torch.randint(0, TGT_V, (2, 2))
    logits, weights = model(src, lens, tgt_in)
    enc, state = model.encoder(src, lens)
    s, fed = state, torch.zeros(2, H)
    cell = torch.nn.GRUCell(E + H, H)
    cell.load_state_dict({k.replace("_l0", ""): v for k, v in dec.rnn.state_dict().items()})
    for t in range(2):
        s_t = cell(torch.cat([dec.embedding(tgt_in[:, t]), fed], -1), s[0])
        s = s_t[None]
        scores = torch.einsum("bh,hk,bsk->bs", s_t, dec.attention_score.W, enc)
        real = torch.arange(5) < lens[:, None]
        a = torch.softmax(scores.masked_fill(~real, -torch.inf), -1)
        c = torch.einsum("bs,bsh->bh", a, enc)
        fed = torch.tanh(torch.cat([c, s_t], -1) @ dec.combine.weight.T)
        torch.testing.assert_close(weights[:, t], a)
        torch.testing.assert_close(logits[:, t], dec.output(fed))


def test_luong_scores():
    model = _model("luong", score="dot")
    query, keys = torch.randn(2, 3, H), torch.randn(2, 4, H)
    lens = torch.tensor([4, 2])
    _, weights = model.decoder.attend(query, keys, lens)
    expected = torch.softmax((query @ keys.transpose(1, 2))[0], -1)
    torch.testing.assert_close(weights[0], expected)
    assert (weights[1, :, 2:] == 0).all()
    assert model.decoder.attention_score is None
    concat = _model("luong", score="concat").decoder
    assert isinstance(concat.attention_score, AdditiveScore)
    general = _model("luong", score="general").decoder
    assert isinstance(general.attention_score, BilinearScore)
    with pytest.raises(ValueError, match="score must be one of"):
        _model("luong", score="scaled")


def test_make_seq2seq_picks_the_decoder():
    kinds = {True: s2s.AttentionDecoder, "bahdanau": s2s.AttentionDecoder,
             "luong": s2s.LuongDecoder, False: s2s.FixedContextDecoder,
             "none": s2s.FixedContextDecoder}
    for attention, decoder_class in kinds.items():
        assert type(_model(attention).decoder) is decoder_class
    with pytest.raises(ValueError, match="attention must be"):
        _model("dot")


# --- loss and training ----------------------------------------------------------------------


def test_sequence_loss_ignores_padding():
    torch.manual_seed(0)
    logits = torch.randn(2, 4, 5)
    tgt_out = torch.tensor([[1, 2, 3, 0], [4, 0, 0, 0]])
    lens = torch.tensor([3, 1])
    loss = experiment.sequence_loss(logits, tgt_out, lens)
    real = [(0, 0), (0, 1), (0, 2), (1, 0)]
    expected = sum(-torch.log_softmax(logits[b, t], -1)[tgt_out[b, t]] for b, t in real) / len(real)
    torch.testing.assert_close(loss, expected)
    changed = logits.clone()
    changed[0, 3] += 50.0
    changed[1, 1:] -= 50.0
    torch.testing.assert_close(experiment.sequence_loss(changed, tgt_out, lens), loss)
    with pytest.raises(ValueError, match="need logits"):
        experiment.sequence_loss(logits, tgt_out[:, :3], lens)


def test_a_tiny_attention_model_learns():
    corpus = make_translation_corpus(n_train=256, n_val=0, n_test=0, seed=0, max_len=6)
    torch.manual_seed(0)
    model = s2s.make_seq2seq(
        len(corpus.src_vocab), len(corpus.tgt_vocab), embed_dim=16, hidden_dim=32
    )
    history = train(
        model,
        experiment.seq2seq_loss,
        corpus.loader(batch_size=32),
        epochs=8,
        lr=0.01,
        device="cpu",
        progress=False,
    )
    assert sum(history[-5:]) / 5 < 0.5 * sum(history[:5]) / 5
    out = experiment.translate(model, corpus.train[0][0], corpus.src_vocab, corpus.tgt_vocab)
    assert out.weights.shape == (
        min(len(out.tokens) + 1, 30),
        len(corpus.train[0][0]) + 1,
    )
    torch.testing.assert_close(out.weights.sum(-1), torch.ones(out.weights.shape[0]))


# --- BLEU and exact match, against hand-worked examples -------------------------------------


def test_modified_precision_papineni_example():
    # Papineni et al. (2002): "the" x 7 against "the cat is on the mat" -> 2/7
    candidate = ["the"] * 7
    assert metrics.modified_precision(candidate, "the cat is on the mat".split(), 1) == (2, 7)
    assert metrics.modified_precision("a b a b".split(), "a b c".split(), 2) == (1, 3)


def test_bleu_hand_worked():
    ref = "a b c d e".split()
    assert metrics.sentence_bleu(ref, ref) == pytest.approx(1.0)
    # all n-grams match, but the candidate is short: BP = exp(1 - 5/4)
    assert metrics.sentence_bleu("a b c d".split(), ref) == pytest.approx(math.exp(-0.25))
    # p1 = 4/5, p2 = 2/4 (a b, d e), p3 = 0/3
    cand = "a b x d e".split()
    assert metrics.sentence_bleu(cand, ref, max_n=2) == pytest.approx(math.sqrt(0.8 * 0.5))
    assert metrics.sentence_bleu(cand, ref) == 0.0
    # a longer candidate gets no brevity bonus: p1 = 5/6, p2 = 4/5, BP = 1
    assert metrics.sentence_bleu("a b c d e e".split(), ref, max_n=2) == pytest.approx(
        math.sqrt(5 / 6 * 4 / 5)
    )


def test_corpus_bleu_pools_counts_over_sentences():
    cands = [["a", "b", "c"], ["d", "e"]]
    refs = [["a", "b", "c"], ["d", "f"]]
    # p1 = (3 + 1) / 5, p2 = (2 + 0) / 3, r = c = 5
    assert metrics.corpus_bleu(cands, refs, max_n=2) == pytest.approx(math.sqrt(4 / 5 * 2 / 3))
    with pytest.raises(ValueError, match="as many candidates"):
        metrics.corpus_bleu(cands, refs[:1])
    with pytest.raises(ValueError, match="max_n"):
        metrics.corpus_bleu(cands, refs, max_n=0)


def test_exact_match_and_buckets():
    refs = [["汤姆", "追", "杰瑞"], ["a", "b"], ["x"]]
    assert metrics.exact_match([["汤姆", "追", "杰瑞"], ["a"], ["x"]], refs) == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match="as many candidates"):
        metrics.exact_match([], [])
    pairs = [(["w"] * n, ["z"] * n) for n in (3, 4, 8, 16)]
    preds = [["z"] * 3, ["z"] * 3, ["z"] * 8, ["z"] * 16]
    rows = metrics.scores_by_length(pairs, preds)
    assert [(r["length"], r["n"]) for r in rows] == [
        ("3-6", 2),
        ("7-10", 1),
        ("15-20", 1),
        ("all", 4),
    ]
    assert rows[0]["exact_match"] == pytest.approx(0.5)
    assert rows[-1]["exact_match"] == pytest.approx(0.75)
    assert "exact match" in metrics.format_table(rows, title="t")


def test_mean_std_and_the_table_over_seeds():
    assert metrics.mean_std([1.0, 3.0]) == (2.0, 1.0)
    assert metrics.mean_std([0.5]) == (0.5, 0.0)
    with pytest.raises(ValueError, match="at least one"):
        metrics.mean_std([])
    pairs = [(["w"] * n, ["z"] * n) for n in (3, 4, 12)]
    run_a = metrics.scores_by_length(pairs, [["z"] * 3, ["z"] * 4, ["z"] * 12])
    run_b = metrics.scores_by_length(pairs, [["z"] * 3, ["y"] * 4, ["z"] * 12])
    table = metrics.format_over_seeds({"model": [run_a, run_b], "other": [run_a]})
    header, first, second = table.splitlines()
    assert header.split() == ["3-6", "11-14", "all"]
    # 3-6: 100% and 50% -> 75 ± 25; 11-14: 100% twice; all: 100% and 66.7%
    assert first.split()[1:4] == ["75.0", "±", "25.0"]
    assert first.split()[4:7] == ["100.0", "±", "0.0"]
    assert "83.3 ±" in first and second.split()[0] == "other"
    assert "1.00 ± 0.00" in metrics.format_over_seeds({"m": [run_a]}, metric="bleu")
    with pytest.raises(ValueError, match="different length buckets"):
        metrics.format_over_seeds({"m": [run_a, run_a[1:]]})


# --- GPU ------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_attention_model_on_cuda_matches_cpu():
    model = _model(attention=True)
    src, lens = _batch([4, 7, 2])
    tgt_in = torch.randint(0, TGT_V, (3, 5))
    logits, weights = model(src, lens, tgt_in)
    model.cuda()
    logits_gpu, weights_gpu = model(src.cuda(), lens.cuda(), tgt_in.cuda())
    assert weights_gpu.device.type == "cuda"
    assert (weights_gpu[2, :, 2:] == 0).all()
    torch.testing.assert_close(logits_gpu.cpu(), logits, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(weights_gpu.cpu(), weights, atol=1e-5, rtol=1e-4)
    decoded = experiment.greedy_decode(model, src.cuda(), lens.cuda(), 1, 2, max_len=6)
    assert decoded.ids.device.type == "cuda" and decoded.weights.device.type == "cuda"
