"""Reading a checkpoint's text files (``read_text``: a UTF-8 byte order mark skipped;
``read_json_object``: config.json, generation_config.json, tokenizer_config.json) and checking
single values of ``config.json``, shared by ``models/config.py`` and ``models/yarn.py``. Free of
torch, so the tokenizer can import it.

Python's ``json`` reads more than numbers: ``Infinity``, ``NaN`` and ``1e400`` (inf) are floats,
``true``/``false`` are ints, a number may be a string. Each helper takes the raw value, returns it
in its Python type, and raises ``ValueError`` naming the field (``config field hidden_size must be
a positive integer, got 64.9``); ``Qwen3Config.from_dict`` puts ``config.json has an invalid
value:`` in front. No value reaches ``int()``/``math`` unchecked, so none fails later with a raw
Python message (``cannot convert float infinity to integer``).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from models.paths import is_symlink_loop

MAX_INT = 2**31 - 1  # sizes and counts: far past any model, and within int32 kernel arguments
# NOTE: RoPE turns positions into float32 (``positions.float() * inv_freq``, as transformers does),
# which holds every integer only up to 2**24: a longer context would give two tokens one position.
MAX_POSITIONS = 2**24
POSITIONS_REASON = "2**24: RoPE positions are float32, exact only up to there"


def read_text(path: Path) -> str:
    """The text of the UTF-8 file ``path``, a leading byte order mark (some Windows editors write
    one) skipped: it is no part of the text (a chat template would render it into every prompt;
    Python's ``json`` refuses it: "Unexpected UTF-8 BOM").

    Raises:
        ValueError: the file cannot be read (no read permission, say) or is not UTF-8; the
            message names the file and the reason (``cannot read PATH: permission denied ...``).
    """
    try:
        data = path.read_bytes()
    except OSError as e:
        raise unreadable(path, e) from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ValueError(f"cannot read {path}: not UTF-8 text ({e})") from None


def unreadable(path: Path, error: OSError) -> ValueError:
    """The error for a file the OS would not let us read, naming it and the reason
    (``cannot read PATH: permission denied (make the file readable ...)``)."""
    reason = (error.strerror or type(error).__name__).lower()
    if isinstance(error, PermissionError):
        reason += " (make the file readable by this user, e.g. chmod a+r)"
    return ValueError(f"cannot read {path}: {reason}")


def unlistable(folder: Path, error: OSError, what: str = "folder") -> ValueError:
    """The error for a folder the OS would not let us list (``Path.glob`` would call it empty):
    ``cannot list the <what> PATH: permission denied (make it readable ...)``."""
    reason = (error.strerror or type(error).__name__).lower()
    if isinstance(error, PermissionError):
        reason += " (make it readable by this user, e.g. chmod a+rx)"
    return ValueError(f"cannot list the {what} {folder}: {reason}")


def optional_file(path: Path) -> bool:
    """Whether the optional file ``path`` (``generation_config.json``, ``chat_template.jinja``,
    ...) is there: True for a file or a link to one, False when nothing is at ``path``.

    Raises:
        ValueError: something else is at ``path`` (a folder, a link to nothing, a loop of
            links, a device),
            naming it: that is a broken download or copy, and skipping it as absent would drop
            what the file configures without a word.
        PermissionError: a folder above ``path`` may not be searched (the CLI words it).
    """
    if path.is_file():
        return True
    if path.exists():
        what = "a folder" if path.is_dir() else "a special file (a device, a pipe or a socket)"
        raise ValueError(f"cannot read {path}: it is {what}, not a file")
    if path.is_symlink():
        if is_symlink_loop(path):
            raise ValueError(f"cannot read {path}: it is a loop of symbolic links")
        raise ValueError(f"cannot read {path}: it links to {os.readlink(path)}, which does not "
                         "exist")
    return False


def optional_json_object(path: Path) -> dict:
    """``read_json_object(path)`` for an optional file, ``{}`` when nothing is at ``path``
    (``optional_file``: a folder or a broken link there is a ValueError)."""
    return read_json_object(path) if optional_file(path) else {}


def read_json_object(path: Path) -> dict:
    """The JSON object in the file ``path`` (``read_text``: a UTF-8 BOM is skipped).

    Raises:
        ValueError: the file cannot be read or is not UTF-8 (``read_text``), is not valid JSON
            (nested too deep, or an integer of more digits than Python converts, included), or
            holds another JSON value than an object (the message names the file and the value's
            type).
    """
    text = read_text(path)
    try:
        d = json.loads(text)
    except (ValueError, RecursionError) as e:  # JSONDecodeError is a ValueError
        raise ValueError(f"cannot read {path}: not valid JSON ({e})") from None
    if not isinstance(d, dict):
        raise ValueError(f"cannot read {path}: expected a JSON object, got {json_kind(d)}")
    return d


def json_kind(value) -> str:
    """What ``value`` (from ``json.loads``) is called in JSON: null, true, an array, ..."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    kinds = ((dict, "an object"), (list, "an array"), (str, "a string"),
             ((int, float), "a number"))
    return next((name for types, name in kinds if isinstance(value, types)), type(value).__name__)


def shown(value) -> str:
    """``repr(value)``, cut to 40 characters (a message stays one readable line); a float that
    is not finite as JSON spells it (``Infinity``, ``NaN``: what the file says)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else "Infinity" if value > 0 else "-Infinity"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def to_int(name: str, value, *, minimum: int = 1, maximum: int = MAX_INT,
           why: str | None = None) -> int:
    """An integer field, in ``minimum..maximum``: a JSON integer, an integral float (``4096.0``)
    or a string of one (``"4096"``), as config.json has always been read. Refused: ``true`` and
    ``false``, a float with a fraction (``64.9``, not rounded), ``Infinity``/``NaN``, anything
    else. ``why`` says where ``maximum`` comes from (in the message when it is passed)."""
    n = value
    if isinstance(value, float) and value.is_integer():  # False for inf and NaN
        n = int(value)
    elif isinstance(value, str):
        try:
            n = int(value)
        except ValueError:
            pass
    if isinstance(n, bool) or not isinstance(n, int) or n < minimum:
        rule = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise ValueError(f"config field {name} must be {rule}, got {shown(value)}")
    if n > maximum:
        raise ValueError(f"config field {name} must be at most {maximum:,}"
                         + (f" ({why})" if why else "") + f", got {shown(value)}")
    return n


def real(name: str, value, rule: str, ok=lambda x: True) -> float:
    """A JSON number (not a string, ``true`` or ``false``) that is finite (not ``Infinity``,
    ``NaN``, ``1e400`` or an integer too large for a float) and passes ``ok``, as a float;
    ``rule`` words the accepted values for the message (``a positive finite number``)."""
    x = math.nan
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            x = float(value)
        except OverflowError:  # an integer of 400 digits
            x = math.inf
    if not (math.isfinite(x) and ok(x)):
        raise ValueError(f"config field {name} must be {rule}, got {shown(value)}")
    return x


def positive_number(name: str, value) -> float:
    """A finite JSON number > 0, as a float (``real``)."""
    return real(name, value, "a positive finite number", lambda x: x > 0)


def boolean(name: str, value) -> bool:
    """``true`` or ``false`` (not 1, ``"no"`` or null)."""
    if not isinstance(value, bool):
        raise ValueError(f"config field {name} must be true or false, got {shown(value)}")
    return value
