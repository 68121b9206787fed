"""The broker rules that differ between RocketMQ versions, each in one method.

Every rule that changed between 4.9.x and 5.x lives here and nowhere else, so adding 5.x later
means adding one :class:`Semantics` instance, not hunting through the processors. Only 4.9.4 is
implemented; asking for another version is a clear operating error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from broker_core.constants import DLQ_PERM
from broker_core.errors import BadInputError

# ThreadLocalRandom.current().nextInt(99999999) % retryQueueNums picks the retry queue in 4.9.4
# (SendMessageProcessor.asyncConsumerSendMsgBack); the bound is RocketMQ's, not ours.
RETRY_QUEUE_RANDOM_BOUND = 99_999_999


class RandomSource(Protocol):
    """The part of a seeded ``random.Random`` stream the broker draws from."""

    def randrange(self, stop: int) -> int: ...

    def random(self) -> float: ...


@dataclass(frozen=True)
class Semantics:
    """One RocketMQ version's answers to the questions the broker asks while storing."""

    version: str

    def dlq_on_send_back(self, reconsume_times: int, max_reconsume_times: int,
                         delay_level: int) -> bool:
        """CONSUMER_SEND_MSG_BACK goes to the DLQ (§5.2 step 7): out of retries or a negative level."""
        return reconsume_times >= max_reconsume_times or delay_level < 0

    def dlq_on_retry_topic_send(self, reconsume_times: int, max_reconsume_times: int) -> bool:
        """A normal send to %RETRY%group goes to the DLQ (§5.3): 4.9.4 compares with >=."""
        return reconsume_times >= max_reconsume_times

    def retry_queue_id(self, rng: RandomSource, retry_queue_nums: int) -> int:
        """The retry queue of a send-back (§5.2 step 3): ``nextInt(99999999) % n`` in 4.9.4."""
        assert retry_queue_nums > 0, f"retry_queue_nums must be positive, got {retry_queue_nums}"
        return rng.randrange(RETRY_QUEUE_RANDOM_BOUND) % retry_queue_nums

    def dlq_perm(self) -> int:
        """Permission of an auto-created DLQ topic: R|W since 4.9.2."""
        return DLQ_PERM

    def strip_wait_from_stored_properties(self) -> bool:
        """4.9.4 asyncSendMessage drops WAIT from the stored string but keeps it in the map (§1.5)."""
        return True

    def dlq_send_keeps_client_delay(self) -> bool:
        """4.9.4 handleRetryAndDLQ clears DELAY on a map that is then replaced (§5.3): it survives.

        (5.x stores DELAY=-1 instead, so its DLQ copy is never delayed.)"""
        return True

    def send_back_store_host_from_message(self) -> bool:
        """4.9.4 copies the looked-up message's storeHost into the send-back copy (§5.2 step 9)."""
        return True


SEMANTICS_4_9 = Semantics(version="4.9")

_BY_VERSION = {"4.9": SEMANTICS_4_9, "4.9.4": SEMANTICS_4_9}


def semantics_for(version: str) -> Semantics:
    """The rule set for a broker version string ("4.9"); any other version is rejected."""
    found = _BY_VERSION.get(str(version))
    if found is None:
        raise BadInputError(
            f"broker semantics {version!r} is not supported (supported: 4.9)",
            where="broker.semantics")
    return found
