"""Every test starts with no frozen objects: a daemon cycle freezes what survives it (collector.paused(freeze=True)),
which in a test process would keep the garbage of earlier tests from ever being collected."""

from __future__ import annotations

import gc

import pytest


@pytest.fixture(autouse=True)
def _unfrozen():
    yield
    gc.unfreeze()
