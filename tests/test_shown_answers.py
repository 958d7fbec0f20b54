"""The text a turn is shown, byte for byte: every template's prompt built from realistic
replies (the leading space after ``Answer:``, the blank lines a stop string leaves, a stop
string cut by the length limit, empty answers, several answers)."""

from __future__ import annotations

import json

import pytest

from cory.agents.prompts import PromptEncoder
from cory.config.loading import resolve
from cory.config.schema import TaskConfig
from cory.models.tiny import char_tokenizer
from cory.tasks.arithmetic import build_arithmetic
from cory.tasks.custom import custom_task
from cory.tasks.hh import build_hh
from cory.tasks.imdb import OBSERVER_TEMPLATE as IMDB_OBSERVER, build_imdb
from cory.tasks.math import Problem, math_task
from cory.tasks.shown import EMPTY_ANSWER, AnswerJoin
from cory.tasks.toy import build_toy
from cory.types import Prompt


# A SmolLM2 reply to an arithmetic prompt, as the pipeline keeps it: decoded, cut where the
# model started the next "Question:", so it starts with a space and ends in blank lines.
PIONEER = " Tom has 2 + 6 = 8 books left.\n#### 8\n\n"
SECOND = " Tom had 2 books and got 6 more: 2 + 6 = 8.\n#### 8\n"
QUESTION = "Question: Tom has 2 books. Tom gets 6 more books. How many books does Tom have now?\nAnswer:"
PROMPT = Prompt(QUESTION, "8", "Tom has 2 + 6 = 8 books.\n#### 8")


def arithmetic(**overrides) -> object:
    return build_arithmetic(TaskConfig(name="arithmetic", n_train=20, n_test=4, few_shot=0,
                                       chat_template=False, **overrides))


@pytest.mark.parametrize(("reply", "shown"), [
    (PIONEER, "Tom has 2 + 6 = 8 books left.\n#### 8"),
    ("  #### 8\n\nQuest", "#### 8"),  # the length limit cut the stop string
    ("#### 8\nQ", "#### 8"),
    ("#### 8 Question", "#### 8 Question"),  # not at a line start: a word of the answer
    ("Questions are fun\n#### 3", "Questions are fun\n#### 3"),
    ("", EMPTY_ANSWER),
    (" \n\n", EMPTY_ANSWER),
])
def test_a_clean_join_shows_an_answer_without_what_generation_left(reply, shown):
    assert AnswerJoin(stop_strings=("Question:",)).show(reply) == shown


def test_a_verbatim_join_shows_replies_as_generated():
    assert AnswerJoin(separator="\n", verbatim=True).join([PIONEER, "", SECOND]) == f"{PIONEER}\n\n{SECOND}"


def test_the_plain_arithmetic_observer_sees_the_pioneer_cleanly():
    prompt = arithmetic().prompt_for(PROMPT, [PIONEER])
    assert prompt == (f"{QUESTION} Tom has 2 + 6 = 8 books left.\n#### 8\n"
                      "The solution above may be wrong. A checked solution:")


def test_answer_join_verbatim_reproduces_the_join_before_the_fix():
    prompt = arithmetic(answer_join="verbatim", answer_separator="\n").prompt_for(PROMPT, [PIONEER])
    assert prompt == (f"{QUESTION}  Tom has 2 + 6 = 8 books left.\n#### 8\n\n\n"
                      "The solution above may be wrong. A checked solution:")


def test_the_plain_revise_prompt_separates_several_answers_by_a_blank_line():
    prompt = arithmetic().prompt_for(PROMPT, [PIONEER, "", SECOND], revising=True)
    assert prompt == (f"{QUESTION} Tom has 2 + 6 = 8 books left.\n#### 8\n\n{EMPTY_ANSWER}\n\n"
                      "Tom had 2 books and got 6 more: 2 + 6 = 8.\n#### 8\n"
                      "The solutions above may be wrong. A checked solution:")


def test_a_chat_observer_gets_the_answer_inside_its_own_message():
    task = math_task("gsm8k", TaskConfig(name="gsm8k", chat_template=True),
                     [Problem("Q0?", "s #### 1", "1")] * 3, [Problem("Tom has 2 books. He gets 6. How many?",
                                                                    "2 + 6 = 8\n#### 8", "8")], None)
    reply = "2 + 6 = 8.\n#### 8\n"  # a chat reply ends at EOS: no stop string, a trailing newline
    text = task.prompt_for(task.test[0], [reply])
    assert text == ("Tom has 2 books. He gets 6. How many?\nSolve the problem step by step. Write the final "
                    "answer as a number after '####'.\n\nHere is a proposed solution:\n2 + 6 = 8.\n#### 8\n\n"
                    "Check it step by step and write a correct solution. "
                    "Write the final answer as a number after '####'.")
    tokenizer = char_tokenizer()
    tokenizer.chat_template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
                               "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    formatted = PromptEncoder("agent0", tokenizer, True, 512, 16, None).format(text)
    assert formatted == f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"


def test_the_hh_observer_sees_the_answer_after_one_space_and_no_blank_lines(tmp_path):
    source = tmp_path / "hh.jsonl"
    dialogue = "\n\nHuman: How do I boil an egg?\n\nAssistant:"
    source.write_text("".join(json.dumps({"chosen": f"\n\nHuman: Question {i}?\n\nAssistant: Yes.",
                                          "rejected": f"\n\nHuman: Question {i}?\n\nAssistant: No."}) + "\n"
                              for i in range(6)))
    task = build_hh(TaskConfig(name="hh", source=str(source), n_test=1))
    query = Prompt(dialogue)
    prompt = task.prompt_for(query, [" Put it in boiling water for 9 minutes.\n\n"])
    assert prompt == (f"{dialogue} Put it in boiling water for 9 minutes.\n\nHuman: Please give a better answer: "
                      "more helpful, honest and harmless.\n\nAssistant:")


def test_imdb_keeps_the_authors_continuation_template_byte_for_byte(tmp_path):
    """The reply continues the review: its leading space and line ends are kept, exactly as
    ``template.format(query=..., answers="\\n".join(answers))`` built it before."""
    source = tmp_path / "reviews.txt"
    source.write_text("".join(f"This film number {i} was a real treat to watch again\n" for i in range(12)))
    task = build_imdb(TaskConfig(name="imdb", source=str(source), n_test=3), char_tokenizer())
    query = task.test[0]
    for answers in ([" was great!\n"], [" was great", " was awful\n\n", ""]):
        before = IMDB_OBSERVER.format(query=query.query, answers="\n".join(answers))
        assert task.prompt_for(query, answers) == before
    assert task.prompt_for(query, [" was great"]) == f'I can make this sentence "{query.query} was great" ' \
                                                     f"more positive: {query.query}"


def test_toy_answers_are_token_strings_shown_verbatim():
    task = build_toy(TaskConfig(name="toy", n_train=4, n_test=2))
    assert task.prompt_for(Prompt("abc"), [" aa \n"]) == " aa \n|abc"


def test_a_python_api_task_shows_answers_cleanly(tmp_path):
    config = resolve({"model": "tiny-random", "output_dir": str(tmp_path)})
    task = custom_task(config, [Prompt(f"q{i}") for i in range(6)], [Prompt("What is 2+6?")])
    assert task.prompt_for(task.test[0], [" 8\n\n"]) == "What is 2+6?\nAn earlier answer:\n8\nYour answer:\n"


def test_answer_separator_overrides_the_tasks_default():
    task = arithmetic(answer_separator=" | ")
    assert task.prompt_for(PROMPT, ["#### 1", "#### 2"], revising=True).startswith(f"{QUESTION} #### 1 | #### 2\n")
