"""The rank's heartbeat (issue 15): a touch of LEZERO_HEARTBEAT_FILE, at most once a second, and
nothing outside lezero-run."""
from __future__ import annotations

import os

from lezero.runtime import heartbeat


def test_beat_touches_the_file_at_most_once_a_second(tmp_path, monkeypatch):
    path = tmp_path / "rank0"
    path.write_text("")
    os.utime(path, (0, 0))
    monkeypatch.setenv(heartbeat.ENV_VAR, str(path))
    monkeypatch.setattr(heartbeat, "_last_beat", -heartbeat.MIN_INTERVAL_S)
    heartbeat.beat()
    first = path.stat().st_mtime
    assert first > 0
    os.utime(path, (0, 0))
    heartbeat.beat()  # within the second: no touch
    assert path.stat().st_mtime == 0


def test_beat_does_nothing_outside_lezero_run(tmp_path, monkeypatch):
    monkeypatch.delenv(heartbeat.ENV_VAR, raising=False)
    monkeypatch.setattr(heartbeat, "_last_beat", -heartbeat.MIN_INTERVAL_S)
    heartbeat.beat()
    assert list(tmp_path.iterdir()) == []
