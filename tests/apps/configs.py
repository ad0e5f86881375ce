"""An app instance's ``config:`` block in a test: what the supervisor hands it (``MCC_CONFIG``)."""

from __future__ import annotations

import json
from typing import Any


def configured(env: dict[str, str], **config: Any) -> dict[str, str]:
    """``env`` with the ``config:`` block ``config`` (JSON, as `mcc up` writes it); none when
    ``config`` is empty (an app without a config model refuses a block)."""
    if not config:
        return dict(env)
    return {**env, "MCC_CONFIG": json.dumps(config, default=str)}
