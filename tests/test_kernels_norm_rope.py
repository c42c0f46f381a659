"""kernels/rmsnorm.py and kernels/qk_norm_rope.py against kernels/reference.py (model numerics).

CPU (Triton interpreter): float32 and float16 over odd hidden sizes, residual or not, GQA groups
1/4/5, head dims 16/32/128, positions up to 131072 with and without YaRN. The oracles are first
checked to equal the model's own torch modules bit for bit, so the kernels are held to the model.
Measured on the CPU: float32 differs from the oracle by <= 1e-6 abs (values up to ~10: float32
reduction order, numpy vs torch cos/sin); float16 was bit-exact in every case tried (the tolerance
allows one float16 rounding step). bfloat16 is not testable here: the interpreter's float32 ->
bfloat16 cast truncates instead of rounding to nearest.

GPU (``-m gpu``): bfloat16 at Qwen3-8B shapes (max error printed). Whole models with the fused
kernels against the torch path: ``tests/test_model_fused_forward.py``.
"""

from __future__ import annotations

import pytest
import torch

from kernels import reference as ref
from kernels.qk_norm_rope import MAX_DECODE_ROWS, qk_norm_rope
from kernels.qk_norm_rope import heads_per_program as heads_per_program_of
from kernels.rmsnorm import rmsnorm
from models.config import YarnScaling
from models.qwen3 import RMSNorm
from models.rope import RotaryEmbedding, apply_rope, rope_parameters

TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float16: dict(rtol=2e-3, atol=2e-3),
       torch.bfloat16: dict(rtol=1.6e-2, atol=1.6e-2)}
YARN = YarnScaling(factor=4.0, original_max_position_embeddings=32768)


def _rand(*shape, dtype, scale=1.0, device="cpu"):
    return (torch.randn(*shape) * scale).to(device=device, dtype=dtype)


# ---------------------------------------------------------------------------- oracles = model


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_oracles_equal_the_model_torch_path(dtype):
    x, r = _rand(5, 80, dtype=dtype, scale=3), _rand(5, 80, dtype=dtype)
    norm = RMSNorm(80, 1e-6).to(dtype)
    norm.weight.data = _rand(80, dtype=dtype)
    with torch.no_grad():
        assert torch.equal(ref.rms_norm(x, norm.weight, 1e-6), norm(x))
        out, res = ref.rms_norm(x, norm.weight, 1e-6, residual=r)
        assert torch.equal(res, x + r) and torch.equal(out, norm(r + x))

        rope = RotaryEmbedding(32, 1e6, YARN)
        pos = torch.tensor([0, 7, 4095, 40_000, 131_071])
        q, k = _rand(5, 4, 32, dtype=dtype), _rand(5, 2, 32, dtype=dtype)
        qn, kn = RMSNorm(32, 1e-6).to(dtype), RMSNorm(32, 1e-6).to(dtype)
        qn.weight.data, kn.weight.data = _rand(32, dtype=dtype), _rand(32, dtype=dtype)
        cos, sin = rope.cos_sin(pos, dtype)
        qo, ko = ref.qk_norm_rope(q, k, qn.weight, kn.weight, 1e-6, pos, rope.inv_freq_cpu,
                                  rope.attention_factor)
        assert torch.equal(qo, apply_rope(qn(q), cos, sin))
        assert torch.equal(ko, apply_rope(kn(k), cos, sin))


# ---------------------------------------------------------------------------- rmsnorm


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("tokens,hidden", [(1, 16), (3, 80), (7, 320), (2, 1000)])
@pytest.mark.parametrize("with_residual", [False, True])
def test_rmsnorm_matches_reference(dtype, tokens, hidden, with_residual):
    x = _rand(tokens, hidden, dtype=dtype, scale=4)
    w = _rand(hidden, dtype=dtype)
    eps = 1e-6
    if not with_residual:
        torch.testing.assert_close(rmsnorm(x, w, eps), ref.rms_norm(x, w, eps), **TOL[dtype])
        return
    r = _rand(tokens, hidden, dtype=dtype, scale=2)
    out, res = rmsnorm(x, w, eps, residual=r)
    ref_out, ref_res = ref.rms_norm(x, w, eps, residual=r)
    assert torch.equal(res, ref_res)  # the model-dtype add is exact-rounded either way
    torch.testing.assert_close(out, ref_out, **TOL[dtype])
    assert torch.equal(x, x.clone()) and out.data_ptr() != x.data_ptr()


def test_rmsnorm_strided_rows_and_large_values():
    base = _rand(4, 200, dtype=torch.float32, scale=1e3)
    x = base[:, 20:100]  # row stride 200, last dim contiguous
    w = _rand(80, dtype=torch.float32)
    torch.testing.assert_close(rmsnorm(x, w, 1e-5), ref.rms_norm(x, w, 1e-5), **TOL[torch.float32])
    r = base[:, 100:180]
    out, res = rmsnorm(x, w, 1e-5, residual=r)
    torch.testing.assert_close(out, ref.rms_norm(x, w, 1e-5, residual=r)[0], **TOL[torch.float32])
    assert torch.equal(res, x + r)


def test_rmsnorm_rejects_bad_inputs():
    x = torch.randn(2, 16)
    with pytest.raises(ValueError, match="weight"):
        rmsnorm(x, torch.ones(8), 1e-6)
    with pytest.raises(ValueError, match="dtype"):
        rmsnorm(x, torch.ones(16, dtype=torch.float16), 1e-6)
    with pytest.raises(ValueError, match="residual"):
        rmsnorm(x, torch.ones(16), 1e-6, residual=torch.randn(3, 16))
    assert rmsnorm(torch.randn(0, 16), torch.ones(16), 1e-6).shape == (0, 16)
    wide = torch.randn(2, 32)
    with pytest.raises(ValueError, match="rmsnorm: x needs a contiguous last dim"):
        rmsnorm(wide[:, ::2], torch.ones(16), 1e-6)
    with pytest.raises(ValueError, match="rmsnorm: weight must be contiguous"):
        rmsnorm(x, torch.ones(32)[::2], 1e-6)
    with pytest.raises(ValueError, match="rmsnorm: residual needs a contiguous last dim"):
        rmsnorm(x, torch.ones(16), 1e-6, residual=wide[:, ::2])


# ---------------------------------------------------------------------------- qk_norm_rope


def _qk_case(tokens, kv_heads, group, head_dim, dtype, yarn, max_pos, fused_view=True):
    """q/k as views into one fused qkv row (the model's layout), plus weights and positions."""
    hq = kv_heads * group
    qkv = _rand(tokens, (hq + 2 * kv_heads) * head_dim, dtype=dtype, scale=2)
    q = qkv[:, :hq * head_dim].view(tokens, hq, head_dim)
    k = qkv[:, hq * head_dim:(hq + kv_heads) * head_dim].view(tokens, kv_heads, head_dim)
    if not fused_view:
        q, k = q.contiguous(), k.contiguous()
    qw, kw = _rand(head_dim, dtype=dtype), _rand(head_dim, dtype=dtype)
    pos = torch.randint(0, max_pos, (tokens,))
    pos[0] = max_pos - 1
    inv_freq, af = rope_parameters(head_dim, 1e6, YARN if yarn else None)
    return q, k, qw, kw, pos, inv_freq, af


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("group", [1, 4, 5])
@pytest.mark.parametrize("head_dim", [16, 32, 128])
@pytest.mark.parametrize("yarn", [False, True])
def test_qk_norm_rope_matches_reference(dtype, group, head_dim, yarn):
    max_pos = 131072 if yarn else 40960
    kv_heads = 2 if group < 5 else 1
    q, k, qw, kw, pos, inv_freq, af = _qk_case(3, kv_heads, group, head_dim, dtype, yarn, max_pos)
    qo, ko = qk_norm_rope(q, k, qw, kw, 1e-6, pos, inv_freq, af)
    rq, rk = ref.qk_norm_rope(q, k, qw, kw, 1e-6, pos, inv_freq, af)
    assert qo.shape == q.shape and ko.shape == k.shape and qo.dtype == dtype
    torch.testing.assert_close(qo, rq, **TOL[dtype])
    torch.testing.assert_close(ko, rk, **TOL[dtype])


def test_qk_norm_rope_contiguous_inputs_and_small_positions():
    q, k, qw, kw, pos, inv_freq, af = _qk_case(5, 2, 3, 32, torch.float32, False, 8,
                                               fused_view=False)
    qo, ko = qk_norm_rope(q, k, qw, kw, 1e-6, pos, inv_freq, af)
    rq, rk = ref.qk_norm_rope(q, k, qw, kw, 1e-6, pos, inv_freq, af)
    torch.testing.assert_close(qo, rq, **TOL[torch.float32])
    torch.testing.assert_close(ko, rk, **TOL[torch.float32])


def _qk_in_decode_steps(q, k, qw, kw, pos, inv_freq, af):
    """qk_norm_rope launched on steps of MAX_DECODE_ROWS tokens (one head per program)."""
    outs = [qk_norm_rope(q[i:i + MAX_DECODE_ROWS], k[i:i + MAX_DECODE_ROWS], qw, kw, 1e-6,
                         pos[i:i + MAX_DECODE_ROWS], inv_freq, af)
            for i in range(0, q.shape[0], MAX_DECODE_ROWS)]
    return torch.cat([o[0] for o in outs]), torch.cat([o[1] for o in outs])


@pytest.mark.parametrize(("kv_heads", "group", "heads_per_program"),
                         [(2, 3, 8), (1, 5, 2), (1, 4, 1)])
def test_qk_norm_rope_head_groups_equal_one_head_per_program(kv_heads, group,
                                                             heads_per_program):
    """A prefill chunk's programs take G heads of a token each; every row comes out bit for bit
    as a decode step's one-head programs compute it, and matches the reference."""
    tokens = 2 * MAX_DECODE_ROWS + 3
    assert heads_per_program_of(tokens, kv_heads * (group + 1)) == heads_per_program
    assert heads_per_program_of(MAX_DECODE_ROWS, kv_heads * (group + 1)) == 1
    case = _qk_case(tokens, kv_heads, group, 32, torch.float32, True, 131072)
    qo, ko = qk_norm_rope(case[0], case[1], case[2], case[3], 1e-6, *case[4:])
    sq, sk = _qk_in_decode_steps(*case)
    assert torch.equal(qo, sq) and torch.equal(ko, sk)
    rq, rk = ref.qk_norm_rope(case[0], case[1], case[2], case[3], 1e-6, *case[4:])
    torch.testing.assert_close(qo, rq, **TOL[torch.float32])
    torch.testing.assert_close(ko, rk, **TOL[torch.float32])


def test_qk_norm_rope_rejects_bad_inputs():
    q, k, qw, kw, pos, inv_freq, af = _qk_case(2, 1, 2, 16, torch.float32, False, 100)
    with pytest.raises(ValueError, match="positions"):
        qk_norm_rope(q, k, qw, kw, 1e-6, pos.int(), inv_freq, af)
    with pytest.raises(ValueError, match="inv_freq"):
        qk_norm_rope(q, k, qw, kw, 1e-6, pos, inv_freq[:4], af)
    with pytest.raises(ValueError, match="dtype"):
        qk_norm_rope(q, k, qw.half(), kw, 1e-6, pos, inv_freq, af)
    with pytest.raises(ValueError, match="even"):
        qk_norm_rope(q[..., :15], k[..., :15], qw[:15], kw[:15], 1e-6, pos, inv_freq, af)
    with pytest.raises(ValueError, match="qk_norm_rope: k needs a contiguous last dim"):
        qk_norm_rope(q, torch.cat([k, k], -1)[..., ::2], qw, kw, 1e-6, pos, inv_freq, af)
    with pytest.raises(ValueError, match="qk_norm_rope: q_weight must be contiguous"):
        qk_norm_rope(q, k, torch.cat([qw, qw])[::2], kw, 1e-6, pos, inv_freq, af)
    with pytest.raises(ValueError, match="qk_norm_rope: inv_freq must be contiguous"):
        qk_norm_rope(q, k, qw, kw, 1e-6, pos, torch.cat([inv_freq, inv_freq])[::2], af)


# ---------------------------------------------------------------------------- GPU


def _max_err(a, b):
    return (a.float() - b.float()).abs().max().item()


def _ulp_mismatch(a, b, rel=2 ** -7):
    """Fraction of elements differing by more than ~1 bfloat16 ulp (relative to |b|)."""
    d = (a.float() - b.float()).abs()
    return (d > rel * b.float().abs().clamp(min=1e-3)).float().mean().item()


@pytest.mark.gpu
@pytest.mark.parametrize("tokens", [1, 513])
@pytest.mark.parametrize("with_residual", [False, True])
def test_gpu_rmsnorm_bf16_8b_shapes(tokens, with_residual):
    dt, dev = torch.bfloat16, "cuda"
    x, w = _rand(tokens, 4096, dtype=dt, scale=4, device=dev), _rand(4096, dtype=dt, device=dev)
    r = _rand(tokens, 4096, dtype=dt, scale=4, device=dev) if with_residual else None
    got = rmsnorm(x, w, 1e-6, residual=r)
    want = ref.rms_norm(x, w, 1e-6, residual=r)
    if with_residual:
        assert torch.equal(got[1], want[1])
        got, want = got[0], want[0]
    print(f"\nrmsnorm bf16 T={tokens}: max abs err {_max_err(got, want):.3g}, "
          f">1ulp {_ulp_mismatch(got, want):.2%}, exact {torch.equal(got, want)}")
    torch.testing.assert_close(got, want, **TOL[dt])
    assert _ulp_mismatch(got, want) < 0.01


@pytest.mark.gpu
@pytest.mark.parametrize("tokens", [1, 300])
@pytest.mark.parametrize("yarn", [False, True])
def test_gpu_qk_norm_rope_bf16_8b_shapes(tokens, yarn):
    torch.manual_seed(0)
    q, k, qw, kw, pos, inv_freq, af = _qk_case(tokens, 8, 4, 128, torch.bfloat16, yarn,
                                               131072 if yarn else 40960)
    args = [t.cuda() for t in (q, k, qw, kw, pos, inv_freq)]
    qo, ko = qk_norm_rope(*args[:4], 1e-6, *args[4:], af)
    rq, rk = ref.qk_norm_rope(*args[:4], 1e-6, *args[4:], af)
    # The judge is float32: the torch path rounds cos/sin and the products to bf16 step by step,
    # the kernel once at the end, so the two bf16 results differ by an ulp in ~3 % of elements
    # (measured on an H200); the kernel must be no further from float32 than the torch path.
    f32 = [t.float() if t.is_floating_point() and t is not args[5] else t for t in args]
    tq, tk = ref.qk_norm_rope(*f32[:4], 1e-6, *f32[4:], af)
    for name, got, want, truth in (("q", qo, rq, tq), ("k", ko, rk, tk)):
        err_kernel = ((got.float() - truth).norm() / truth.norm()).item()
        err_torch = ((want.float() - truth).norm() / truth.norm()).item()
        print(f"\nqk_norm_rope bf16 T={tokens} yarn={yarn} {name}: max abs err vs torch path "
              f"{_max_err(got, want):.3g}, >1ulp {_ulp_mismatch(got, want):.2%}; relative L2 "
              f"vs float32: kernel {err_kernel:.3g}, torch path {err_torch:.3g}")
        torch.testing.assert_close(got, want, **TOL[torch.bfloat16])
        assert err_kernel <= 1.1 * err_torch


@pytest.mark.gpu
def test_gpu_qk_norm_rope_head_groups_bit_exact():
    """The 8B's 40 heads, 300 tokens: 8 heads per program equal one head per program (16-token
    launches) bit for bit in bfloat16."""
    torch.manual_seed(0)
    case = [t.cuda() if isinstance(t, torch.Tensor) else t
            for t in _qk_case(300, 8, 4, 128, torch.bfloat16, True, 131072)]
    assert heads_per_program_of(300, 40) == 8
    qo, ko = qk_norm_rope(case[0], case[1], case[2], case[3], 1e-6, *case[4:])
    sq, sk = _qk_in_decode_steps(*case)
    assert torch.equal(qo, sq) and torch.equal(ko, sk)
