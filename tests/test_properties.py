"""Property-based tests (hypothesis): the config parser, the override syntax, the extractor."""

import string

from hypothesis import given, settings
from hypothesis import strategies as st

from cory.config.loading import load_config
from cory.config.tree import parse_override, set_dotted
from cory.errors import ConfigError
from cory.tasks.answers import extract_answer

identifiers = st.text(string.ascii_lowercase + "_", min_size=1, max_size=8)


@settings(max_examples=60, deadline=None)
@given(st.floats(min_value=1e-9, max_value=10.0, allow_nan=False), st.integers(1, 8), st.integers(1, 4))
def test_valid_values_round_trip_through_overrides(learning_rate, mini, factor):
    config = load_config(None, [f"ppo.learning_rate={learning_rate!r}", f"ppo.mini_batch_size={mini}",
                                f"ppo.batch_size={mini * factor}", "model=tiny-random"])
    assert config.ppo.learning_rate == learning_rate
    assert config.ppo.batch_size == mini * factor


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(["steps", "ppo.learning_rate", "ppo.cliprange", "collective.lambda", "seed",
                        "generation.top_p", "ppo.adap_kl_ctrl", "task.name"]),
       st.text(max_size=12))
def test_arbitrary_override_text_never_crashes_the_parser(key, text):
    try:
        load_config(None, [f"{key}={text}", "model=tiny-random"])
    except ConfigError as error:
        assert key.split(".")[-1] in str(error) or "lambda" in str(error) or "n_agents" in str(error)


@settings(max_examples=100, deadline=None)
@given(st.lists(identifiers, min_size=1, max_size=4), st.one_of(st.integers(), st.booleans(), identifiers))
def test_override_syntax_round_trips(parts, value):
    keys, parsed = parse_override(".".join(parts) + "=" + str(value).lower())
    assert keys == parts
    tree: dict = {}
    set_dotted(tree, keys, parsed.parsed)
    node = tree
    for part in parts:
        node = node[part]
    assert node == parsed.parsed


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=80))
def test_extractor_never_raises(text):
    answer = extract_answer(text)
    assert answer is None or isinstance(answer, str)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=string.ascii_letters + " .,\n", max_size=40), st.integers(-10**9, 10**9))
def test_extractor_finds_the_final_hash_answer(prefix, number):
    assert extract_answer(f"{prefix}\n#### {number:,}") == str(number)
    assert extract_answer(f"{prefix} The answer is {number}.") == str(number)
