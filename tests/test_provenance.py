"""The environment record of a run: versions, threads and the weights it read."""

import hashlib
import json

import torch

from cory.provenance import ENVIRONMENT_FILE, describe_device, weights_sha256
from cory.rewards.reward_model import train_reward_model


def test_weights_sha256_covers_names_and_bytes_of_the_weight_files_only(tmp_path):
    (tmp_path / "b.safetensors").write_bytes(b"\x01\x02")
    (tmp_path / "a.bin").write_bytes(b"xyz")
    (tmp_path / "config.json").write_text("{}")  # not a weight file
    expected = hashlib.sha256(b"a.bin\0xyz" + b"b.safetensors\0\x01\x02").hexdigest()
    assert weights_sha256(tmp_path) == expected
    (tmp_path / "a.bin").write_bytes(b"xyZ")
    assert weights_sha256(tmp_path) != expected
    assert weights_sha256(tmp_path / "missing") is None and weights_sha256("org/hub-id") is None


def test_each_start_and_resume_records_the_environment_and_the_reward_weights(tmp_path, make_config):
    from cory.trainer import Trainer

    pairs = [(f"about {w}: ", f"a {w}", f"b {w}") for w in ["sun", "tree", "cat", "road"] * 4]
    train_reward_model(pairs, tmp_path / "rm", backbone="tiny-random", epochs=1, batch_size=8,
                       max_length=32, log=lambda _: None)
    reward = {"name": "reward_model", "model": str(tmp_path / "rm")}
    for steps, resume in ((2, None), (3, "auto")):
        trainer = Trainer(make_config(steps=steps, save_every=1, eval_every=0, reward=reward, resume=resume,
                                      device="auto"))
        trainer.train()
        trainer.close()
    lines = [json.loads(line) for line in (tmp_path / "run" / ENVIRONMENT_FILE).read_text().splitlines()]
    assert [line["step"] for line in lines] == [0, 2]
    first = lines[0]
    assert first["torch"] == torch.__version__ and first["threads"] == torch.get_num_threads()
    expected_device = describe_device(torch.device("cuda" if torch.cuda.is_available() else "cpu"))
    assert first["devices"] == [expected_device]  # where the agent lives, not the configured "auto"
    assert first["weights"]["agent0"] == {"spec": "tiny-random", "sha256": None}
    assert first["weights"]["reward"]["sha256"] == weights_sha256(tmp_path / "rm") is not None
