"""Data determinism, disjoint holder shares, and the supported formats."""

from __future__ import annotations

import json

import pytest
import torch

from models.data import EMBEDDED, DataError, DataStream, Schedule, open_source
from models.tokenizer import ByteTokenizer


def test_embedded_corpus_is_deterministic_and_large() -> None:
    source = open_source(EMBEDDED, ByteTokenizer())
    assert len(source) > 10_000_000
    schedule = Schedule(8, 2)
    a = DataStream(source, 64, seed=3)
    b = DataStream(open_source(EMBEDDED, ByteTokenizer()), 64, seed=3)
    for it in (0, 5):
        for m in range(schedule.microbatches):
            assert torch.equal(a.microbatch(it, m, schedule), b.microbatch(it, m, schedule))
    other = DataStream(source, 64, seed=4)
    assert not torch.equal(a.microbatch(0, 0, schedule), other.microbatch(0, 0, schedule))


def test_holder_shares_are_disjoint_and_cover_the_batch() -> None:
    schedule = Schedule(24, 2)
    for holders in (1, 2, 3, 5):
        shares = [schedule.holder_share(k, holders) for k in range(holders)]
        flat = [m for share in shares for m in share]
        assert sorted(flat) == list(range(schedule.microbatches))
        assert len(flat) == len(set(flat))


def test_windows_of_an_epoch_are_all_distinct(tmp_path) -> None:
    (tmp_path / "a.txt").write_text("".join(f"{i:09d}\n" for i in range(100)))  # 100 distinct windows
    stream = DataStream(open_source(str(tmp_path), ByteTokenizer()), 10, seed=0)
    schedule = Schedule(5, 1)
    rows = [stream.microbatch(it, m, schedule)[0] for it in range(20) for m in range(5)]
    starts = {tuple(r.tolist()) for r in rows}
    assert len(rows) == stream.num_windows == 100 and len(starts) == 100  # an epoch covers every window


def test_text_file_and_jsonl(tmp_path) -> None:
    text = tmp_path / "t.txt"
    text.write_text("hello world " * 20)
    source = open_source(str(text), ByteTokenizer())
    assert ByteTokenizer().decode(source.read(0, 11)) == "hello world"
    jsonl = tmp_path / "d.jsonl"
    jsonl.write_text("\n".join(json.dumps({"body": f"doc {i} " * 5}) for i in range(10)))
    source = open_source(str(jsonl), ByteTokenizer(), text_field="body")
    assert ByteTokenizer().decode(source.read(0, 6)) == "doc 0 "
    assert 256 in source.read(0, len(source)).tolist()  # documents end with end-of-text


@pytest.mark.parametrize(
    "content, message",
    [("{bad json", "not valid JSON"), ('{"other": "x"}', "no string field 'text'")],
)
def test_bad_jsonl(tmp_path, content: str, message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(DataError, match=message):
        open_source(str(path), ByteTokenizer())


def test_missing_and_empty_data(tmp_path) -> None:
    with pytest.raises(DataError, match="does not exist"):
        open_source(str(tmp_path / "nope"), ByteTokenizer())
    with pytest.raises(DataError, match="holds no text"):
        open_source(str(tmp_path), ByteTokenizer())
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(DataError, match="empty"):
        open_source(str(tmp_path), ByteTokenizer())


def test_schedule_rejects_non_dividing_microbatch() -> None:
    with pytest.raises(DataError, match="does not divide"):
        Schedule(10, 3)
