"""Reading a W&B offline run file: the steps it holds (for an exact resume).

The ``.wandb`` file is W&B's record log: 32 KiB blocks of records, each behind a 7-byte
header (checksum, length, kind: 1 full, 2 first, 3 middle, 4 last piece); a record's payload
is a protobuf ``Record`` of ``wandb_internal_pb2``.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any, Iterator, cast

BLOCK = 32768
HEADER = 7


def records(path: Path) -> Iterator[bytes]:
    """The payloads of every complete record in the file (a torn tail is skipped)."""
    data = Path(path).read_bytes()
    position, pending = HEADER, b""  # the file starts with a 7-byte header of its own
    while position + HEADER <= len(data):
        if BLOCK - position % BLOCK < HEADER:
            position += BLOCK - position % BLOCK
            continue
        _, length, kind = struct.unpack("<IHB", data[position:position + HEADER])
        chunk = data[position + HEADER:position + HEADER + length]
        if kind == 0 or len(chunk) < length:
            return
        position += HEADER + length
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):
            yield pending


def history(path: Path) -> list[dict[str, str]]:
    """The history rows of an offline run file, each as ``{key: JSON text}``."""
    from wandb.proto import wandb_internal_pb2  # optional: the [wandb] extra

    rows = []
    for raw in records(path):
        record = cast(Any, wandb_internal_pb2).Record()  # generated protobuf
        try:
            record.ParseFromString(raw)
        except Exception:  # a record cut short by a kill
            continue
        if record.WhichOneof("record_type") == "history":
            rows.append({item.key or "/".join(item.nested_key): item.value_json for item in record.history.item})
    return rows


def last_offline_step(wandb_dir: Path, run_id: str) -> int | None:
    """The highest ``_step`` with metrics (not only a sample table) in every offline file of
    run ``run_id`` under ``wandb_dir``."""
    steps = [int(json.loads(row["_step"])) for path in Path(wandb_dir).glob(f"offline-run-*-{run_id}/run-{run_id}.wandb")
             for row in history(path)
             if "_step" in row and any(not k.startswith(("_", "samples")) for k in row)]
    return max(steps) if steps else None
