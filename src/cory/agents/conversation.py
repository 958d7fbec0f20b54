"""A multi-turn episode kept as token ids: the prompt, then each action exactly as the agent
sampled it, then each observation encoded once and appended. Nothing is decoded and encoded
again, so the ids the update trains on are the ids that were sampled.

With a chat template an observation is a user message: what is appended after an action is
what the template renders between the assistant's reply and the next assistant turn (the
end of the assistant message, the user message, the next assistant header), minus an
end-of-turn token the agent already sampled. The template must render every conversation as
a prefix of its continuation, byte for byte; a template that rewrites earlier turns (one
that drops earlier reasoning, say) is refused with its name."""

from __future__ import annotations

from transformers import PreTrainedTokenizerBase

from cory.errors import CoryError

MARKER = "\u2063cory-action\u2063"  # stands for the assistant's reply while the template renders


class Conversation:
    """One episode's ids. ``ids`` is what the agent's next turn is prompted with."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, query: str, use_chat: bool) -> None:
        self.tokenizer, self.use_chat = tokenizer, use_chat
        self.messages = [{"role": "user", "content": query}]
        self.rendered = self._render(self.messages, generation=True) if use_chat else query
        self.ids: list[int] = tokenizer(self.rendered, add_special_tokens=not use_chat)["input_ids"]
        self.action_spans: list[tuple[int, int]] = []  # [start, end) of each action in ``ids``
        self.last_action: list[int] = []

    def act(self, action_ids: list[int], action_text: str) -> None:
        """Append the agent's sampled ids (``action_text`` is them decoded, for the template)."""
        self.action_spans.append((len(self.ids), len(self.ids) + len(action_ids)))
        self.ids = self.ids + action_ids
        self.messages.append({"role": "assistant", "content": action_text})
        self.last_action = action_ids

    def observe(self, text: str) -> None:
        """Append the environment's answer, encoded once."""
        if not self.use_chat:
            self.ids = self.ids + self.tokenizer(text, add_special_tokens=False)["input_ids"]
            return
        with_marker = [*self.messages[:-1], {"role": "assistant", "content": MARKER}, {"role": "user", "content": text}]
        before, _, tail = self._render(with_marker, generation=True).partition(MARKER)
        if before != self.rendered:
            raise CoryError("task.chat_template: the model's chat template renders a conversation differently "
                            "once it continues (an earlier turn changes), so its ids cannot be kept turn by turn; "
                            "use a template that only appends, or task.chat_template: false")
        ended = str(self.tokenizer.decode(self.last_action[-1:])) if self.last_action else ""
        if ended and tail.startswith(ended):  # the agent sampled the end of its turn itself
            tail = tail[len(ended):]
        self.ids = self.ids + self.tokenizer(tail, add_special_tokens=False)["input_ids"]
        self.messages.append({"role": "user", "content": text})
        self.rendered = self._render(self.messages, generation=True)

    def _render(self, messages: list[dict[str, str]], generation: bool) -> str:
        return str(self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation))
