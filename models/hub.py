"""Resolve a MODEL argument to a local checkpoint folder: a local folder, or a Hugging Face hub id.

A hub id is fetched with ``huggingface_hub.snapshot_download``, restricted to the files ``infer``
reads (config, generation config, tokenizer, safetensors weights and their index), so the HF cache
(``HF_HOME`` / ``HF_HUB_CACHE``), the hub's progress bars and ``HF_HUB_OFFLINE=1`` all behave as
they do for any other Hugging Face tool. Bad input is a ``ValueError`` and an unreachable hub a
``HubUnreachableError``. Every hub failure reads ``cannot fetch NAME from the Hugging Face hub:
WHY; WHAT TO DO`` (the transport's own words in WHY, never its class name); ``cli.py`` renders it as
one line, exit 2 for bad input (a malformed id, no such repository, ``HF_HUB_OFFLINE`` without a
cached copy) and 1 for a runtime failure (the hub could not be reached).
"""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path

from models.config_values import optional_file, unlistable
from models.paths import check_symlink_loop, expand_user

ALLOW_PATTERNS = [
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",  # transformers 5 keeps the template here, not in tokenizer_config
    "*.safetensors",
    "model.safetensors.index.json",
]

_LOCAL_HINT = ("pass a local folder holding config.json, tokenizer.json, tokenizer_config.json "
               "and *.safetensors instead (python3 -m models.random_checkpoint --out DIR writes "
               "one, with the tokenizer files of --tokenizer DIR)")
_TOKENIZER_HINT = ("copy tokenizer.json and tokenizer_config.json of the same model into it "
                   "(e.g. from a Qwen3 checkpoint folder)")


class HubUnreachableError(RuntimeError):
    """The hub could not be reached (no connection, timeout, server error) and the model is not
    in the HF cache: a failure while running, not bad input (the CLI exits 1, not 2)."""


def _transport_errors() -> tuple[type[BaseException], ...]:
    """OSError plus the HTTP client's errors (huggingface_hub >= 1.0 talks through httpx, whose
    transport errors are not OSErrors)."""
    import importlib

    errors: list[type[BaseException]] = [OSError]
    for module in ("httpx", "httpx2"):
        try:
            errors.append(importlib.import_module(module).HTTPError)
        except (ImportError, AttributeError):
            pass
    return tuple(errors)


def hub_offline() -> bool:
    """True when ``HF_HUB_OFFLINE`` is set to a true value now (read at call time, not import)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in {"1", "ON", "YES", "TRUE"}


def _looks_like_path(name: str) -> bool:
    """A name that can only be a filesystem path, never a hub id ``[owner/]repo``."""
    return (os.path.isabs(name) or name.startswith((".", "~")) or "\\" in name
            or name.endswith("/") or name.count("/") > 1)


def check_model_folder(folder: Path) -> Path:
    """Check that ``folder`` holds what the loader and tokenizer read; return it resolved.

    Raises ``ValueError`` naming the missing files, or for a folder that may not be listed.
    """
    if not folder.is_dir():
        raise ValueError(f"{folder} is not a folder: pass the folder that holds config.json")
    try:  # Path.glob would take a folder that may not be listed for an empty one
        names = os.listdir(folder)
    except OSError as e:
        raise unlistable(folder, e, "model folder") from None
    # a folder, a broken link or a device in a file's place: named (optional_file), not "missing"
    missing = [f for f in ("config.json", "tokenizer.json") if not optional_file(folder / f)]
    if not any(n.endswith(".safetensors") for n in names):
        missing.append("*.safetensors")
    if missing == ["tokenizer.json"]:  # weights without a tokenizer: say which files to add
        raise ValueError(f"model folder {folder} has no tokenizer.json: {_TOKENIZER_HINT}")
    if missing:
        raise ValueError(f"model folder {folder} has no {', '.join(missing)}: {_LOCAL_HINT}")
    return folder.resolve()


def resolve_model(name_or_path: str | Path) -> Path:
    """Return the local folder of a model given as a folder path or a hub id like ``Qwen/Qwen3-8B``.

    An existing path is used as it is (after checking its files). Anything else that is shaped
    like a hub id is downloaded (only ``ALLOW_PATTERNS``) into the HF cache, or found there when
    ``HF_HUB_OFFLINE`` is set.

    Raises:
        ValueError: bad input: the name is empty, the folder lacks files, the path does not
            exist or is a symlink loop, the hub id is malformed, names no (accessible)
            repository, or is not cached while ``HF_HUB_OFFLINE`` is set; the message suggests a
            local folder.
        HubUnreachableError: the hub could not be reached (network) and the model is not
            cached; the message suggests a local folder.
    """
    name = str(name_or_path)
    if not name.strip():
        raise ValueError("MODEL is empty: give a local checkpoint folder or a hub id such as "
                         "Qwen/Qwen3-8B")
    path = expand_user(name)  # a ~user of no such user: a missing folder, not a RuntimeError
    check_symlink_loop(path, "the checkpoint folder itself, or a hub id")
    if path.exists():
        return check_model_folder(path)
    if path.is_symlink():  # a link to nothing is a local folder gone, not a hub id to fetch
        raise ValueError(f"model folder {name} links to {os.readlink(path)}, which does not "
                         "exist")
    if _looks_like_path(name):
        raise ValueError(f"model folder {name} does not exist")

    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (
        EntryNotFoundError,
        HFValidationError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    offline = hub_offline()
    try:
        folder = snapshot_download(name, allow_patterns=ALLOW_PATTERNS, local_files_only=offline)
    except HFValidationError:
        raise ValueError(f"{name!r} is neither a local folder nor a valid hub id "
                         f"(owner/name); {_LOCAL_HINT}") from None
    except _transport_errors() as e:
        no_such = isinstance(e, (RepositoryNotFoundError, RevisionNotFoundError)) or (
            isinstance(e, EntryNotFoundError) and not isinstance(e, LocalEntryNotFoundError))
        fetch = f"cannot fetch {name} from the Hugging Face hub"
        # an id is also a relative path: say that no such folder exists (a mistyped path)
        here = f" (there is no folder {name} here either)"
        local = _local_file_error(e)
        if local is not None:  # the HF cache or token file, not the network
            raise ValueError(f"{fetch}: the Hugging Face cache cannot be used ({local}); set "
                             f"HF_HOME to a writable folder, or {_LOCAL_HINT}{here}") from None
        if offline:  # bad input: the user asked for the cache only
            raise ValueError(f"{fetch}: HF_HUB_OFFLINE is set and it is not in the HF cache; "
                             f"unset HF_HUB_OFFLINE, or {_LOCAL_HINT}{here}") from None
        if no_such:  # bad input: the hub answered that there is no such (accessible) repo
            raise ValueError(f"{fetch}: no such repository or revision, or it is private or "
                             f"gated (log in for those); {_LOCAL_HINT}{here}") from None
        reason = _reason(e)  # the hub could not be reached: a runtime failure
        raise HubUnreachableError(
            f"{fetch}: the hub cannot be reached{f' ({reason})' if reason else ''} and it is "
            f"not in the HF cache; check the network, or {_LOCAL_HINT}{here}") from None
    return check_model_folder(Path(folder))


# what a broken HF_HOME / HF_HUB_CACHE gives (a file in the path, no permission, a full or
# read-only disk); the network's OSErrors name no file
_LOCAL_ERRNOS = (errno.ENOTDIR, errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC,
                 errno.EEXIST, errno.EISDIR)


def _local_file_error(e: BaseException) -> str | None:
    """``"not a directory: '/dev/null/token'"`` when the innermost cause of ``e`` is an OSError
    of a local file (``_LOCAL_ERRNOS``, a file named), else None."""
    while e.__cause__ is not None:
        e = e.__cause__
    if isinstance(e, OSError) and e.filename and e.errno in _LOCAL_ERRNOS:
        return f"{os.strerror(e.errno).lower()}: {str(e.filename)!r}"
    return None


def _reason(e: BaseException) -> str:
    """Why the hub was not reached, in the transport's words: the first line of the innermost
    cause, without a class-name (``Got: ConnectError:``) or ``[Errno -2]`` prefix."""
    while e.__cause__ is not None:
        e = e.__cause__
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    text = re.sub(r"^(Got: )?\w+(Error|Exception|Timeout): ", "", lines[0] if lines else "")
    text = re.sub(r"^\[Errno -?\d+\] ", "", text).rstrip(".")
    return text[:1].lower() + text[1:]
