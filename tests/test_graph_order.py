"""``benchmarks/graph_order.py`` (a greedy graph timed before and after other work): its
``--order`` parsing, and its one-line refusal without a GPU (what it times needs CUDA graphs)."""

from __future__ import annotations

import pytest
import torch

from benchmarks.graph_order import DEFAULT_ORDER, NEXT_ORDERS, main, parse_order


def test_parse_order():
    assert parse_order("greedy, rows2,capture:sampled,eager:torch_sampled,sampled") == [
        ("decode", "greedy"), ("rows2", "greedy"), ("capture", "sampled"),
        ("eager", "torch_sampled"), ("decode", "sampled")]
    assert len(parse_order(DEFAULT_ORDER)) == DEFAULT_ORDER.count(",") + 1
    assert [parse_order(o)[2] for o in NEXT_ORDERS] == [("capture", "sampled")]
    assert parse_order("gencapture:greedy,ownpool:sampled")[1] == ("ownpool", "sampled")
    assert parse_order("register,alloc") == [("register", "greedy"), ("alloc", "greedy")]
    for bad in ("greedy,fast", "capture:rows2", "replay:greedy", "ownpool:", "register:greedy",
                ""):
        with pytest.raises(ValueError, match="unknown --order item"):
            parse_order(bad)


def test_bad_order_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--ckpt", "x", "--order", "greedy,nope"])
    assert e.value.code == 2 and "unknown --order item 'nope'" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for machines without CUDA")
def test_refuses_without_a_gpu(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--ckpt", "x"])
    assert e.value.code == 2 and "needs a CUDA GPU" in capsys.readouterr().err
