"""What operators watch: Prometheus metrics (`mcc.observe.metrics`), OpenTelemetry traces of
the sensor-to-shooter chain (`mcc.observe.trace`), systemd readiness and watchdog
(`mcc.observe.notify`) and JSON logs (`mcc.observe.logs`). docs/observability.md tells how to
wire and scrape them.

Nothing here is imported by the bus or the apps; each module imports its library (
prometheus-client, the OpenTelemetry SDK) only when used. The observer, a mission client that
serves these for a running mission, is `mcc.observer`, above `mcc.orchestrate`.
"""
