"""A deterministic model of a RocketMQ broker: store, delay scheduler, retry and DLQ, clients."""

__version__ = "0.1.0"
