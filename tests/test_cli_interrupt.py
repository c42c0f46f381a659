"""Ctrl-C before a command's work began (``infer.ui.startup``): the imports, the model's files and
tokenizer, the engine's load and warm-up, in every command; through typer's test runner on a tiny
random checkpoint; and in chat between turns. Ctrl-C during a reply is in ``test_cli_streams.py``
(chat's, and at its prompt, in ``test_cli.py``), during the start-up's own
imports (real processes) in ``test_cli_startup.py``, before a summary's parts in
``test_summary_cli.py``, during bench's lengths in ``test_bench.py``."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest
from cli_helpers import FAST, TEXT, invoke

pytestmark = pytest.mark.usefixtures("cli_tokenizer_once")

BENCH = ["--device", "cpu", "--ctx", "1k", "--lengths", "64", "--tokens", "2"]


def ctrl_c(*args, **kwargs):
    raise KeyboardInterrupt


def press_ctrl_c(stage: str, monkeypatch) -> None:
    """Ctrl-C at ``stage``: ``torch`` (its import, before the flags are checked), ``tokenizer``
    (reading it: the model folder is known), ``load`` (the engine's), ``warm`` (the warm-up, as
    on a GPU: the CPU has none)."""
    import infer.ui.prepare
    from models.tokenizer import Qwen3Tokenizer

    if stage == "torch":
        monkeypatch.setattr(infer.ui.prepare, "import_torch", ctrl_c)
    elif stage == "tokenizer":
        monkeypatch.setattr(Qwen3Tokenizer, "from_folder", classmethod(ctrl_c))
    elif stage == "load":
        monkeypatch.setattr("infer.engine.Engine.__init__", ctrl_c)
    else:
        import torch

        real = infer.ui.prepare.warm_engine

        def warm_on_a_gpu(ui, engine, sampling, **kw):
            real(ui, SimpleNamespace(device=torch.device("cuda")), sampling, **kw)

        monkeypatch.setattr("infer.warm_up.warm_up", ctrl_c)
        monkeypatch.setattr(infer.ui.prepare, "warm_engine", warm_on_a_gpu)
        monkeypatch.setattr("infer.ui.oneshot.warm_engine", warm_on_a_gpu)


@pytest.mark.parametrize("json_flag", [False, True])
@pytest.mark.parametrize("stage", ["load", "warm"])
@pytest.mark.parametrize("command", ["generate", "summarize"])
def test_ctrl_c_before_the_reply_is_a_reply_cut_before_it_began(command, stage, json_flag,
                                                                tiny_ckpt, tmp_path, monkeypatch):
    """Ctrl-C while the engine loads or warms up printed the error object ({"error":
    "interrupted"}) with --json; now one line on stderr, or the reply's object (interrupted, no
    token; load_s null before the load finished) as a reply cut by Ctrl-C gives, exit 130."""
    (tmp_path / "t.txt").write_text(TEXT)
    args = ([command, tiny_ckpt, "hi"] if command == "generate"
            else [command, tmp_path / "t.txt", "--model", tiny_ckpt])
    flags = [*FAST, *(["--json"] if json_flag else [])]
    keys = json.loads(invoke(*args, *flags, "--json").stdout).keys()  # an uncut reply's
    press_ctrl_c(stage, monkeypatch)
    result = invoke(*args, *flags)
    assert result.exit_code == 130, result.output
    assert "error" not in result.output and "Traceback" not in result.output
    if not json_flag:
        what = "loading the model" if stage == "load" else "warming up"
        assert result.stdout == "" and re.fullmatch(
            rf"prompt \d+ tokens · interrupted while {what}\n", result.stderr), result.stderr
        return
    obj = json.loads(result.stdout)
    assert obj.keys() == keys and obj["command"] == command
    assert obj["interrupted"] is True and obj["stop_reason"] == "interrupted"
    assert obj["text"] == "" and obj["new_tokens"] == 0 and obj["prompt_tokens"] > 0
    assert (obj["load_s"] is None) is (stage == "load")
    # not measured, so null as the README says (they were 0.0): the warm-up never finished
    assert obj["warm_up_s"] is None and obj["graph_capture_s"] is None


def uncut(command: str, tiny_ckpt, tmp_path) -> tuple[list, dict]:
    """The arguments of ``command`` on the tiny checkpoint, and its uncut ``--json`` object."""
    (tmp_path / "t.txt").write_text(TEXT)
    args = {"generate": ["generate", tiny_ckpt, "hi", *FAST],
            "summarize": ["summarize", tmp_path / "t.txt", "--model", tiny_ckpt, *FAST],
            "chat": ["chat", tiny_ckpt, *FAST], "bench": ["bench", tiny_ckpt, *BENCH]}[command]
    done = invoke(*args, "--json", input="hi\n")
    assert done.exit_code == 0, done.output
    return args, json.loads(done.stdout.splitlines()[0])


@pytest.mark.parametrize("json_flag", [False, True])
@pytest.mark.parametrize("command,stage", [
    ("generate", "torch"), ("generate", "tokenizer"), ("summarize", "torch"),
    ("summarize", "tokenizer"), ("chat", "torch"), ("chat", "tokenizer"), ("chat", "load"),
    ("chat", "warm"), ("bench", "torch"), ("bench", "tokenizer"), ("bench", "load"),
])
def test_ctrl_c_before_the_work_is_the_commands_result_cut_before_it_began(
        command, stage, json_flag, tiny_ckpt, tmp_path, monkeypatch):
    """Ctrl-C before the load (torch's import, the tokenizer), and in chat and bench during the
    load, printed `interrupted` and with --json the error object ({"error": "interrupted"});
    now as generate and summarize during their load: one line saying where it came, or with
    --json the command's own object (a reply's; bench's, with no lengths), interrupted, with
    what is not known yet null; exit 130."""
    args, done = uncut(command, tiny_ckpt, tmp_path)
    press_ctrl_c(stage, monkeypatch)
    result = invoke(*args, *(["--json"] if json_flag else []))
    assert result.exit_code == 130, result.output
    assert "error" not in result.output and "Traceback" not in result.output
    where = {"torch": "before loading the model", "tokenizer": "before loading the model",
             "load": "while loading the model", "warm": "while warming up"}[stage]
    if not json_flag:
        assert (result.stdout, result.stderr) == ("", f"interrupted {where}\n")
        return
    obj = json.loads(result.stdout)
    assert obj.keys() == done.keys() and obj["command"] == command
    assert obj["interrupted"] is True and (obj["load_s"] is None) is (stage != "warm")
    assert obj["warm_up_s"] is None and obj["graph_capture_s"] is None  # not measured
    assert (obj["model"], obj["ctx"]) == ((None, None) if stage == "torch" else
                                          (done["model"], done["ctx"]))
    if command == "bench":
        assert obj["results"] == []
    else:
        assert obj["stop_reason"] == "interrupted" and obj["text"] == ""
        assert obj["new_tokens"] == 0 and obj["prompt_tokens"] is None  # not read yet


def test_ctrl_c_in_triton_import_before_the_parts_is_the_parts_result(tiny_ckpt, texts_dir,
                                                                      monkeypatch):
    """A Ctrl-C in triton's import, as a summary in parts loads its engine, reaches us as an
    ImportError caused by the KeyboardInterrupt (``is_ctrl_c``): the parts' interrupted result
    (as for a plain KeyboardInterrupt there), not the one-reply line without the parts."""
    def ctrl_c_in_an_import(*args, **kwargs):
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as e:
            raise ImportError("initialization failed") from e

    monkeypatch.setattr("infer.ui.summary_view.load_engine", ctrl_c_in_an_import)
    result = invoke("summarize", texts_dir / "pep-0498-literal-string-interpolation.txt",
                    "--model", tiny_ckpt, "--device", "cpu", "--ctx", "2k", "--part-tokens", "16",
                    "--max-new-tokens", "16")
    assert result.exit_code == 130 and result.stdout == "", result.output
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("interrupted summarizing the parts: 0 of "), result.stderr


def test_ctrl_c_in_the_parts_records_their_seed(tiny_ckpt, texts_dir, monkeypatch):
    """A summary in parts cut by Ctrl-C after the parts began: its JSON object records the
    sampling (the seed drawn for the parts), so the parts finished can be reproduced."""
    import json

    def ctrl_c(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("infer.ui.summary_view.Summarizer.run", ctrl_c)
    result = invoke("summarize", texts_dir / "pep-0498-literal-string-interpolation.txt",
                    "--model", tiny_ckpt, "--device", "cpu", "--ctx", "2k", "--part-tokens", "16",
                    "--max-new-tokens", "16", "--temperature", "0.7", "--json")
    assert result.exit_code == 130, result.output
    obj = json.loads(result.stdout)
    assert obj["interrupted"] and obj["split"] and obj["parts"] == []
    assert obj["sampling"]["temperature"] == 0.7 and isinstance(obj["sampling"]["seed"], int)


def test_sigint_deferred_holds_a_ctrl_c_until_the_block_is_done():
    """``import_torch`` runs torch's import under ``sigint_deferred``: a Ctrl-C that came in the
    middle of it (swallowed there before: the command ran on and exited 0) is a KeyboardInterrupt
    once the block is done, and the default handler is back."""
    import os
    import signal
    import time

    from infer.ui.startup import sigint_deferred

    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    done = []
    with pytest.raises(KeyboardInterrupt):
        with sigint_deferred():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)  # Python runs its signal handlers between bytecodes: long enough
            done.append("the block ran to its end")
    assert done == ["the block ran to its end"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with sigint_deferred():  # no Ctrl-C: nothing raised
        done.append("again")
    assert done[-1] == "again"


@pytest.mark.parametrize("json_flag", [False, True])
@pytest.mark.parametrize("where", ["tokenizing", "fit check", "after the reply"])
def test_chat_ctrl_c_between_turns_ends_the_chat_as_at_the_prompt(where, json_flag, tiny_ckpt,
                                                                  monkeypatch):
    """Ctrl-C in the second turn while its message is tokenized (``Conversation.add_user``) or
    its prompt checked (``check_turn``), or once the first reply was shown (``add_reply``),
    printed `interrupted` and with --json the error object ({"error": "interrupted"}), exit
    130; now the chat ends as on a Ctrl-C at the prompt: no error, no object, exit 0 (the lines
    after it are not read)."""
    from infer.ui import repl
    from infer.ui.conversation import Conversation

    target, name = {"tokenizing": (Conversation, "add_user"), "fit check": (repl, "check_turn"),
                    "after the reply": (Conversation, "add_reply")}[where]
    real, calls = getattr(target, name), []

    def ctrl_c_in_turn_two(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2 or where == "after the reply":
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(target, name, ctrl_c_in_turn_two)
    result = invoke("chat", tiny_ckpt, *FAST, *(["--json"] if json_flag else []),
                    input="hello\nagain\nonce more\n")
    assert result.exit_code == 0, result.output
    assert "error" not in result.stderr and "interrupted" not in result.stderr
    assert "Traceback" not in result.output
    replies = 0 if where == "after the reply" else 1  # the first reply, then the Ctrl-C
    if json_flag:
        objs = [json.loads(line) for line in result.stdout.splitlines()]
        assert len(objs) == replies and all(not o["interrupted"] for o in objs)
        assert all("error" not in o for o in objs)
    else:
        assert result.stderr.count("stop:") == replies, result.stderr
