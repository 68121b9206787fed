"""The 5.x proxy (cluster mode) between a gRPC consumer and the broker's POP service.

What a real 5.3.3 proxy did for ``rocketmq-client-java`` 5.0.7 consumers (docs/rocketmq-5x.md
"gRPC consumer through the proxy: confirmed" and "gRPC PushConsumer and the group retry
policies: confirmed"):

* it pops for the client; a push consumer asks for auto renewal, so its receive's invisible time
  is the proxy's ``defaultInvisibleTimeMills`` (60 s), whatever the group's retry policy;
* it reads the group's ``retryMaxTimes`` from the broker's subscription group and gives the client
  ``maxAttempts`` = ``retryMaxTimes`` + 1;
* when a pop returns a record whose reconsume times reached ``maxAttempts``
  (``PopMessageResultFilterImpl``: ``TO_DLQ``), the client is handed nothing: the proxy sends the
  record back with delay level −1 (``forwardMessageToDeadLetterQueue``, a
  ``CONSUMER_SEND_MSG_BACK``), so the broker stores it in ``%DLQ%<group>`` (reconsume times + 1,
  ``RETRY_TOPIC`` = the POP retry topic, ``ORIGIN_MESSAGE_ID`` = that record's offset msgId,
  ``DELAY=0``), and then acks the record's checkpoint.

Not modelled: the proxy's renewal of a message a push consumer holds long, its local mode, and its
minimums on a receive's invisible time and long polling (a scenario's values are used as given).
"""

from __future__ import annotations

from broker_core.broker import codes
from broker_core.broker.pop import PoppedMessage
from broker_core.broker.send_back import consumer_send_msg_back

PROXY_INVISIBLE_MS_DEFAULT = 60_000  # ProxyConfig.defaultInvisibleTimeMills
# ProxyConfig.grpcClientConsumerMaxLongPollingTimeoutMillis: a push consumer's receive waits this long.
PROXY_LONG_POLLING_MS_MAX = 20_000
DLQ_DELAY_LEVEL = -1  # the proxy's send-back asks for the DLQ outright
FORWARD_MAX_RECONSUME_TIMES = 0  # and sends maxReconsumeTimes 0 (ProducerProcessor.forwardMessageToDeadLetterQueue)


def max_attempts(retry_max_times: int) -> int:
    """``maxAttempts`` the proxy gives a gRPC client: the group's ``retryMaxTimes`` + 1."""
    assert retry_max_times >= 0, f"retryMaxTimes {retry_max_times}"
    return retry_max_times + 1


def goes_to_dlq(record, retry_max_times: int) -> bool:
    """The proxy's filter: a popped record whose reconsume times reached ``maxAttempts``."""
    return record.reconsume_times >= max_attempts(retry_max_times)


def forward(broker, record, group: str) -> bool:
    """``ProducerProcessor.forwardMessageToDeadLetterQueue``: ``record`` sent back with delay level
    −1 and maxReconsumeTimes 0, so the broker stores it in ``%DLQ%<group>``; whether it did. The
    proxy forwards a record it popped at maxAttempts, and a FIFO consumer's message at its own."""
    response = consumer_send_msg_back(broker, record.phys_offset, group, DLQ_DELAY_LEVEL,
                                      origin_msg_id=record.msg_id, origin_topic=record.topic,
                                      max_reconsume_times=FORWARD_MAX_RECONSUME_TIMES)
    return response.code == codes.SUCCESS


def forward_to_dlq(broker, message: PoppedMessage, group: str) -> bool:
    """Dead-letter a popped record as the proxy does: forward it, then ack its checkpoint.

    Returns whether the DLQ record was stored; when it was not, nothing is acked and the broker
    revives the record again after its invisible time (the proxy's ack follows a successful send).
    """
    if not forward(broker, message.record, group):
        return False
    broker.pop.ack(message.checkpoint, message.record.queue_offset)
    return True
