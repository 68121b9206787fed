"""Client models: the producer and the push consumer (RocketMQ 4.9.4 client behaviour).

``Producer`` (producer.py) sends with 4.9.4's retry rules; ``ConsumerGroup`` and
``ConsumerSettings`` (consumer.py) run a group of ``PushConsumer`` clients (push_consumer.py)
whose listener is modelled by ``Behavior`` (behavior.py).
"""
