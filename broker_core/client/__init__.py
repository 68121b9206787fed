"""Client models: the producer and the push consumer (RocketMQ 4.9.4 client behaviour)."""
