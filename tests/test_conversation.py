"""A multi-turn episode kept as ids: the ids after every turn are the ids of the whole
conversation encoded at once (plain text, and SmolLM2's chat template with the end-of-turn
token the agent sampled), and a template that rewrites earlier turns is refused."""

from __future__ import annotations

import pytest

from cory.agents.conversation import Conversation
from cory.errors import CoryError
from cory.models.tiny import char_tokenizer

ACTIONS = ["I move up.", "Then right, right."]
OBSERVATIONS = ["Move 1 (up) is blocked by the edge of the grid. You are at (0, 0).", "You reached G."]


def test_a_plain_conversation_keeps_the_ids_of_its_whole_text():
    tokenizer = char_tokenizer()
    query = "Find a way from S to G.\nMoves:"
    conversation = Conversation(tokenizer, query, use_chat=False)
    text = query
    for action, observation in zip(ACTIONS, OBSERVATIONS):
        sampled = tokenizer(" " + action, add_special_tokens=False)["input_ids"]
        conversation.act(sampled, " " + action)
        conversation.observe(f"\n{observation}\nMoves:")
        text += f" {action}\n{observation}\nMoves:"
        assert conversation.ids == tokenizer(text)["input_ids"]
    start, end = conversation.action_spans[1]
    assert tokenizer.decode(conversation.ids[start:end]) == " " + ACTIONS[1]  # what the update trains on


@pytest.mark.integration
def test_smollm2s_chat_conversation_keeps_the_ids_its_template_gives_the_whole_conversation():
    from cory.models.registry import load_tokenizer

    tokenizer = load_tokenizer("smollm2-135m")
    end_of_turn = tokenizer.convert_tokens_to_ids("<|im_end|>")
    conversation = Conversation(tokenizer, "Find a way from S to G.", use_chat=True)
    messages = [{"role": "user", "content": "Find a way from S to G."}]
    for action, observation in zip(ACTIONS, OBSERVATIONS):
        sampled = tokenizer(action, add_special_tokens=False)["input_ids"] + [end_of_turn]  # stopped at EOS
        conversation.act(sampled, action)
        conversation.observe(observation)
        messages += [{"role": "assistant", "content": action}, {"role": "user", "content": observation}]
        whole = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        assert conversation.ids == tokenizer(whole, add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(conversation.ids).endswith("You reached G.<|im_end|>\n<|im_start|>assistant\n")


def test_a_template_that_rewrites_earlier_turns_is_refused():
    tokenizer = char_tokenizer()
    tokenizer.chat_template = ("{% for m in messages %}{% if m['role'] == 'assistant' and not loop.last %}[earlier]"
                               "{% else %}<{{ m['role'] }}>{{ m['content'] }}{% endif %}{% endfor %}"
                               "{% if add_generation_prompt %}<assistant>{% endif %}")
    conversation = Conversation(tokenizer, "q", use_chat=True)
    conversation.act(tokenizer("a", add_special_tokens=False)["input_ids"], "a")
    with pytest.raises(CoryError, match="task.chat_template: the model's chat template renders a conversation"):
        conversation.observe("o")
