"""models.hub.resolve_model: local folders pass through; unfetchable hub ids suggest a folder."""

from __future__ import annotations

import pytest

from models.hub import ALLOW_PATTERNS, hub_offline, resolve_model


@pytest.fixture
def offline_cache(tmp_path, monkeypatch):
    """An empty HF cache with the hub switched off: nothing here may touch the network."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    return tmp_path / "hf-cache"


def _model_folder(path, files=("config.json", "tokenizer.json", "model.safetensors")):
    path.mkdir(parents=True)
    for name in files:
        (path / name).write_text("{}")
    return path


def test_local_folder_passes_through(tmp_path, offline_cache):
    folder = _model_folder(tmp_path / "my-model")
    assert resolve_model(folder) == folder.resolve()
    assert resolve_model(str(folder)) == folder.resolve()


def test_relative_local_folder_wins_over_hub_id(tmp_path, offline_cache, monkeypatch):
    # "Qwen/Qwen3-0.6B" is also a hub id; an existing folder of that name is used as it is.
    folder = _model_folder(tmp_path / "Qwen" / "Qwen3-0.6B")
    monkeypatch.chdir(tmp_path)
    assert resolve_model("Qwen/Qwen3-0.6B") == folder.resolve()


def test_local_folder_missing_files(tmp_path, offline_cache):
    folder = _model_folder(tmp_path / "partial", files=("config.json",))
    with pytest.raises(ValueError, match=r"tokenizer\.json, \*\.safetensors"):
        resolve_model(folder)


def test_file_instead_of_folder(tmp_path, offline_cache):
    path = tmp_path / "config.json"
    path.write_text("{}")
    with pytest.raises(ValueError, match="not a folder"):
        resolve_model(path)


@pytest.mark.parametrize("name", ["./no/such/dir", "/no/such/model/dir", "a/b/c",
                                  "~no-such-user-infer/model"])
def test_missing_path_is_not_sent_to_the_hub(name, offline_cache):
    """A ``~user`` of no such user is a missing folder too (``Path.expanduser`` raised
    RuntimeError: ``resolve_model``'s contract is ValueError for bad input)."""
    with pytest.raises(ValueError, match="does not exist"):
        resolve_model(name)


def test_offline_unknown_hub_id_suggests_local_folder(offline_cache):
    assert hub_offline()
    with pytest.raises(ValueError) as info:
        resolve_model("no-such-owner-xyz/no-such-model-xyz")
    msg = str(info.value)
    assert "no-such-owner-xyz/no-such-model-xyz" in msg
    assert "HF_HUB_OFFLINE" in msg
    assert "local folder" in msg


def test_invalid_hub_id(offline_cache):
    with pytest.raises(ValueError, match="neither a local folder nor a valid hub id"):
        resolve_model("not a repo id")


def test_offline_cached_snapshot_is_found(offline_cache):
    # Lay out the HF cache as snapshot_download leaves it; offline resolution must find it.
    repo = offline_cache / "models--someone--tiny"
    commit = "0" * 40
    snap = _model_folder(repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    assert resolve_model("someone/tiny") == snap.resolve()


def test_allow_patterns_cover_what_the_loader_reads():
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json",
                 "generation_config.json", "model.safetensors.index.json",
                 "chat_template.jinja"):
        assert name in ALLOW_PATTERNS
    assert "*.safetensors" in ALLOW_PATTERNS


def _hub_error(cls, msg="boom"):
    """An instance of a huggingface_hub HTTP error without an HTTP response behind it."""
    e = cls.__new__(cls)
    Exception.__init__(e, msg)
    return e


@pytest.mark.parametrize("kind", ["connection", "local-entry", "httpx"])
def test_unreachable_hub_is_a_runtime_error(kind, monkeypatch, tmp_path):
    """No network (and not cached): HubUnreachableError (exit 1), still suggesting a folder."""
    import huggingface_hub
    from huggingface_hub.errors import LocalEntryNotFoundError

    from models.hub import HubUnreachableError

    def fail(*args, **kw):
        if kind == "connection":
            raise ConnectionError("Failed to establish a new connection")
        if kind == "local-entry":
            raise LocalEntryNotFoundError("cannot find the requested files in the local cache")
        import importlib.util

        name = next(m for m in ("httpx", "httpx2") if importlib.util.find_spec(m))
        httpx = importlib.import_module(name)  # the HTTP client huggingface_hub uses
        raise httpx.ConnectError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fail)
    with pytest.raises(HubUnreachableError, match="check the network, or pass a local folder"
                       ) as info:
        resolve_model("Qwen/Qwen3-0.6B")
    assert not isinstance(info.value, ValueError)
    assert "Error" not in str(info.value) and "Errno" not in str(info.value)  # the words only


def test_unusable_hf_cache_is_bad_input_not_the_network(monkeypatch, tmp_path):
    """HF_HOME under a file (``HF_HOME=/dev/null``): a ValueError naming the cache and the
    file, not "the hub cannot be reached"."""
    import huggingface_hub

    def fail(*args, **kw):
        raise NotADirectoryError(20, "Not a directory", "/dev/null/token")

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fail)
    with pytest.raises(ValueError, match=r"the Hugging Face cache cannot be used \(not a "
                       r"directory: '/dev/null/token'\); set HF_HOME") as info:
        resolve_model("Qwen/Qwen3-0.6B")
    assert "cannot be reached" not in str(info.value)


@pytest.mark.parametrize("cls", ["RepositoryNotFoundError", "GatedRepoError",
                                 "RevisionNotFoundError"])
def test_missing_repo_is_bad_input(cls, monkeypatch, tmp_path):
    import huggingface_hub
    import huggingface_hub.errors as errors

    def fail(*args, **kw):
        raise _hub_error(getattr(errors, cls), "404 Client Error")

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fail)
    with pytest.raises(ValueError, match="no such repository.*local folder") as e:
        resolve_model("no-such-owner/no-such-model")
    # an id is a relative path too: a mistyped folder reads as one that is not there
    assert str(e.value).endswith("(there is no folder no-such-owner/no-such-model here either)")


@pytest.mark.parametrize("name", ["", "  "])
def test_empty_model_name(name):
    with pytest.raises(ValueError, match="MODEL is empty"):
        resolve_model(name)


def test_folder_without_tokenizer_says_which_files_to_add(tmp_path, offline_cache):
    folder = _model_folder(tmp_path / "weights-only", files=("config.json", "model.safetensors"))
    with pytest.raises(ValueError, match=r"has no tokenizer\.json: copy tokenizer\.json and "
                                         r"tokenizer_config\.json of the same model into it"):
        resolve_model(folder)


@pytest.mark.parametrize("relative", [False, True])
def test_a_link_to_nothing_is_a_missing_folder_not_a_hub_id(tmp_path, offline_cache, monkeypatch,
                                                           relative):
    """``ln -s /nope mf; infer generate mf ...``: 'mf' is shaped like a hub id, and was sent to
    the hub ('cannot fetch mf from the Hugging Face hub', exit 1)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mf").symlink_to(tmp_path / "nope")
    name = "mf" if relative else str(tmp_path / "mf")
    with pytest.raises(ValueError, match=f"^model folder {name} links to .*nope, which does not "
                                         "exist$"):
        resolve_model(name)
