"""A chat's conversation: its messages, and the token-level prefix an interrupted reply pins.

Each turn's prompt is the chat template's rendering of the messages (``chat_ids``), so the template
decides what the history looks like (Qwen3's drops the thinking of earlier replies). An interrupted
reply (Ctrl-C) is the exception: the session's cache holds the prompt and the partial reply as the
model wrote it, tokens the template would not give back (the text re-encodes differently, the
stream decoder holds back an unfinished character, an unclosed ``<think>`` renders otherwise). So
after one the conversation pins the tokens::

    pinned = session.cached_ids (prompt + partial reply) + <|im_end|> "\\n"   (ChatML's turn end)

standing for ``messages[:pinned_count]``; a later prompt is ``pinned`` + the template's rendering
of ``messages[pinned_count:]``, which starts with a user message. The Qwen3 template renders each
message on its own (the system prompt only as the first message; old thinking is dropped relative
to the last user message), so that suffix renders as it would inside the whole list. The next turn
then reuses every cached token, and the turns after it reuse the partial reply too. A later
interrupted reply pins again; ``reset`` forgets the pin. No tensor math here.
"""

from __future__ import annotations

from collections.abc import Sequence

TURN_END = "<|im_end|>"  # ChatML: the template closes every turn with TURN_END + "\n"


class Conversation:
    """The messages of one chat and the prompt ids of its next turn (see the module docstring).

    Attributes:
        system: the system prompt (None or empty: none).
        messages: the conversation as ``{"role", "content"}`` dicts, the system prompt first
            (when given); an interrupted reply's content is the text it showed.
    """

    def __init__(self, tokenizer, system: str | None, enable_thinking: bool):
        self.tokenizer, self.enable_thinking, self.system = tokenizer, enable_thinking, system
        self._base = [{"role": "system", "content": system}] if system else []
        self.reset()

    def reset(self) -> None:
        """Forget every turn (the system prompt stays) and the pinned tokens."""
        self.messages: list[dict] = list(self._base)
        self._pinned: list[int] = []
        self._pinned_count = 0

    def add_user(self, text: str) -> list[int]:
        """Append the user's message; return the ids of the prompt that replies to it.

        Raises ValueError (from the chat template); the message is appended all the same, for
        ``drop_user`` to take back as after any failed turn."""
        self.messages.append({"role": "user", "content": text})
        return self._pinned + self.tokenizer.chat_ids(self.messages[self._pinned_count:],
                                                      enable_thinking=self.enable_thinking)

    def fixed_tokens(self) -> int:
        """Tokens of the last ``add_user``'s prompt that are not its message's: the conversation
        before it and the template around it (the prompt's length with the message empty)."""
        empty = [*self.messages[self._pinned_count:-1], {"role": "user", "content": ""}]
        return len(self._pinned) + len(self.tokenizer.chat_ids(
            empty, enable_thinking=self.enable_thinking))

    @property
    def has_history(self) -> bool:
        """Whether the last ``add_user``'s message follows earlier turns (``reset`` drops them)."""
        return len(self.messages) > len(self._base) + 1

    def drop_user(self) -> None:
        """Take back the message of a failed turn (the last ``add_user``)."""
        self.messages.pop()

    def add_reply(self, raw: str, prompt: Sequence[int], cached: Sequence[int], *,
                  interrupted: bool) -> None:
        """Append the assistant's reply ``raw`` (thinking included) to ``prompt``'s turn.

        ``cached`` is the session's ``cached_ids`` after the reply. An interrupted reply whose
        prompt was cached whole (its prefill had finished) pins ``cached`` + the turn end."""
        self.messages.append({"role": "assistant", "content": raw})
        prompt = list(prompt)
        if interrupted and list(cached[:len(prompt)]) == prompt:
            end = [self.tokenizer.added_tokens[TURN_END], *self.tokenizer.encode("\n")]
            self._pinned, self._pinned_count = [*cached, *end], len(self.messages)
