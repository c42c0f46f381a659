"""The `infer` command line's sampling record and seeds, through typer's test runner on a tiny
random checkpoint on the CPU: ``--json``'s ``sampling`` object (the values a reply used and the
seed that reproduces it, drawn when ``--seed`` is not given; one seed for a summary's parts and
its final reply), and seeds that differ only above 32 bits (torch's CPU generator keeps the low
32) giving different replies.
"""

from __future__ import annotations

import pytest
from cli_helpers import FAST, invoke, ok_json

pytestmark = pytest.mark.usefixtures("cli_tokenizer_once")


def test_json_records_the_sampling_and_its_seed_reproduces_the_reply(tiny_ckpt, tmp_path):
    """FAST samples at temperature 1 with seed 0; without --seed a seed is drawn, recorded, and
    reproduces the reply; greedy records no seed. Summarize: one seed for the parts and the
    final reply."""
    no_seed = [a for a in FAST if a not in ("--seed", "0")]
    long = " ".join(["Hello there, how are you today?"] * 3)
    obj = ok_json(invoke("generate", tiny_ckpt, long, *FAST, "--top-k", "7", "--json"))
    # top_p from the checkpoint's generation_config.json: the values the reply used
    assert obj["sampling"] == {"temperature": 1.0, "top_k": 7, "top_p": 0.95, "min_p": 0.0,
                               "presence_penalty": 0.0, "seed": 0}
    drawn = ok_json(invoke("generate", tiny_ckpt, long, *no_seed, "--max-new-tokens", "8",
                           "--json"))
    seed = drawn["sampling"]["seed"]
    assert isinstance(seed, int) and 0 <= seed < 2**63
    again = ok_json(invoke("generate", tiny_ckpt, long, *no_seed, "--max-new-tokens", "8",
                           "--seed", str(seed), "--json"))
    assert again["text"] == drawn["text"] and again["sampling"] == drawn["sampling"]
    greedy = ok_json(invoke("generate", tiny_ckpt, "hi", *no_seed, "--temperature", "0",
                            "--json"))
    assert greedy["sampling"]["temperature"] == 0.0 and greedy["sampling"]["seed"] is None
    book = tmp_path / "book.txt"
    book.write_text("The cat sat on the mat and looked at the sky for a long time. " * 60)
    args = ("summarize", str(book), "--model", tiny_ckpt, *no_seed, "--ctx", "512",
            "--part-tokens", "4")
    first = ok_json(invoke(*args, "--json"))
    rerun = ok_json(invoke(*args, "--seed", str(first["sampling"]["seed"]), "--json"))
    assert first["split"] and len(first["parts"]) > 1 and rerun["text"] == first["text"]
    assert [p["summary"] for p in rerun["parts"]] == [p["summary"] for p in first["parts"]]


def test_seeds_differing_above_32_bits_give_different_replies_on_the_cpu(tiny_ckpt):
    """The decode path reseeds the runner's CPU generator through
    ``infer.sampling.seed_generator`` (torch's CPU generator keeps only the low 32 bits)."""
    def text(seed: int) -> str:
        return ok_json(invoke("generate", tiny_ckpt, "Hello there", *FAST, "--max-new-tokens",
                              "8", "--seed", str(seed), "--json"))["text"]

    assert text(1) != text(1 + 2**32)
    assert text(2**63 - 1) == text(2**63 - 1)


def test_a_seed_with_greedy_sampling_gets_a_note(tiny_ckpt):
    greedy = invoke("generate", tiny_ckpt, "hi", *FAST, "--temperature", "0", "--seed", "3")
    assert greedy.exit_code == 0, greedy.output
    assert "note: --seed does nothing with greedy sampling" in greedy.stderr
    sampled = invoke("generate", tiny_ckpt, "hi", *FAST, "--temperature", "0.7", "--seed", "3")
    assert sampled.exit_code == 0 and "--seed does nothing" not in sampled.stderr
    filters = invoke("generate", tiny_ckpt, "hi", *FAST, "--temperature", "0", "--top-k", "5",
                     "--min-p", "0.1")
    assert "note: --seed and --top-k and --min-p do nothing with greedy sampling (temperature " \
           "0): the reply is the same without them" in filters.stderr


def test_a_filter_on_a_greedy_checkpoint_says_where_greedy_comes_from(tiny_ckpt, tmp_path):
    """generation_config.json's do_sample false is greedy: --top-k alone stayed greedy without
    a word."""
    import json
    import shutil
    folder = tmp_path / "greedy"
    shutil.copytree(tiny_ckpt, folder)
    gen = folder / "generation_config.json"
    gen.write_text(json.dumps({**json.loads(gen.read_text()), "do_sample": False}))
    no_sampling = [a for a in FAST if a not in ("--temperature", "1", "--seed", "0")]
    result = invoke("generate", folder, "hi", *no_sampling, "--top-k", "5")
    assert result.exit_code == 0, result.output
    assert (f"note: --top-k does nothing with greedy sampling (temperature 0, from {gen}; "
            "--temperature samples): the reply is the same without it") in result.stderr

