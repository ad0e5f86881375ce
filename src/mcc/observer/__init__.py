"""The observer: a mission's metrics and traces from one more subscriber on its bus
(``python -m mcc.observer``, docs/observability.md).

It is a mission client (it finds a running mission through `mcc.orchestrate`), so it sits above
orchestrate, while the pieces it serves (`mcc.observe`: metrics, traces, logs, systemd
notification) stay below it for the supervisor and the agents to use.
"""

from mcc.observer._observer import MissionStatusView, TopicCounter, main

__all__ = ["MissionStatusView", "TopicCounter", "main"]
