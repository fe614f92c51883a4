"""Workload traces: loaders for real traces (Azure 2023/2024, BurstGPT, Mooncake, ServeGen), a synthetic generator,
scaling."""

from simulator.trace.loader import load_trace
from simulator.trace.model import PREFIX_BLOCK_TOKENS, RateSeries, Request, RequestColumns, Trace
from simulator.trace.synthetic import SyntheticSpec

__all__ = ["PREFIX_BLOCK_TOKENS", "RateSeries", "Request", "RequestColumns", "SyntheticSpec", "Trace", "load_trace"]
