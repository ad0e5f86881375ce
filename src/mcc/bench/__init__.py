"""Benchmarks: MCC measured against anchor tools in the same invocation."""
