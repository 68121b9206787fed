"""The broker rules that differ between RocketMQ versions, each in one method.

Every rule that changed between 4.9.x and 5.x lives here and nowhere else: the processors ask a
:class:`Semantics` and never test a version string. Two rule sets exist: "4.9" (RocketMQ 4.9.4)
and "5.x" (read in RocketMQ 5.3.3 and checked against a real 5.3.3 broker, docs/rocketmq-5x.md).
Asking for another version is a clear operating error.

Paths in the 5.x comments are those of ``apache/rocketmq`` at tag ``rocketmq-all-5.3.3``:
``BR/`` = ``broker/src/main/java/org/apache/rocketmq/broker/``, ``CL/`` = ``client/src/main/java/
org/apache/rocketmq/client/``, ``CM/`` = ``common/src/main/java/org/apache/rocketmq/common/``,
``ST/`` = ``store/src/main/java/org/apache/rocketmq/store/``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from broker_core.constants import (
    DLQ_PERM,
    TRANSACTION_CHECK_INTERVAL_MS_4_9,
    TRANSACTION_CHECK_INTERVAL_MS_5X,
)
from broker_core.errors import BadInputError
from broker_core.message import HASHMAP_CAPACITY_DEFAULT, PROP_MSG_REGION, PROP_TRACE_SWITCH

# ThreadLocalRandom.current().nextInt(99999999) % retryQueueNums picks the retry queue in 4.9.4
# (SendMessageProcessor.asyncConsumerSendMsgBack); the bound is RocketMQ's, not ours.
RETRY_QUEUE_RANDOM_BOUND = 99_999_999
# new HashMap<>(128) in 5.x MessageDecoder.string2messageProperties (CM/message/MessageDecoder.java).
PROPERTIES_MAP_CAPACITY_5X = 128
# BrokerConfig defaults a 5.x broker writes into every sent message: regionId and traceOn
# (CM/BrokerConfig.java); a real 5.3.3 broker stored MSG_REGION=DefaultRegion, TRACE_ON=true.
REGION_ID_DEFAULT = "DefaultRegion"
TRACE_ON_DEFAULT = "true"


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

    def properties_map_capacity(self) -> int:
        """The initial capacity of the HashMap a broker parses a property string into.

        It decides the order every re-serialized property string comes out in: 16 in 4.9.4
        (``new HashMap<>()``)."""
        return HASHMAP_CAPACITY_DEFAULT

    def properties_trailing_separator(self) -> bool:
        """Whether ``messageProperties2String`` ends the string with a ``\\x02``: not in 4.9.4."""
        return False

    def send_added_properties(self) -> tuple[tuple[str, str], ...]:
        """Properties the broker adds to every SEND_MESSAGE before it stores it: none in 4.9.4
        (its ``buildMsgContext`` runs only when a send hook is registered)."""
        return ()

    def orderly_send_back_reconsume_time(self, reconsume_times: int) -> int:
        """RECONSUME_TIME of an orderly consumer's send to %RETRY% past its max: the message's
        reconsume times in 4.9.4 (``ConsumeMessageOrderlyService.sendMessageBack``)."""
        return reconsume_times

    def unmodelled_faults(self) -> dict[str, str]:
        """Scenario fault kinds the model cannot play under these rules, each with the reason
        (the scenario loader refuses them). 4.9.4: none."""
        return {}

    def fallback_sets_origin_message_id(self) -> bool:
        """Whether the concurrent consumer's own send to %RETRY% (the send-back failed) carries
        ORIGIN_MESSAGE_ID. Up to 5.3.x ``sendMessageBackAsNormalMessage`` sets it on the new
        message and then replaces the whole map with the consumed message's, so a first client
        retry carries none (CL/impl/consumer/DefaultMQPushConsumerImpl; seen on real 4.9.4 and
        5.3.3 brokers)."""
        return False

    def transaction_check_interval_ms_default(self) -> int:
        """``transactionCheckInterval``'s default: 60 s in 4.9.4 (BrokerConfig)."""
        return TRANSACTION_CHECK_INTERVAL_MS_4_9

    def half_carries_transaction_id(self) -> bool:
        """Whether a half message gets ``__transactionId__`` (its UNIQ_KEY): not in 4.9.4
        (TransactionalMessageBridge.parseHalfMessageInner)."""
        return False

    def transaction_ops_batched(self) -> bool:
        """Whether a decision's op record waits for a batch: not in 4.9.4, which writes one op record
        per commit or rollback at once (``addRemoveTagInTransactionOp``; a real 4.9.4 broker stored
        it within 1 ms of the commit)."""
        return False

    def transaction_check_sleep_without_op_ms(self) -> int:
        """How long a check run sleeps when op records were read, none decided the half in hand,
        and no more are there: 4.9.4 reads again at once (TransactionalMessageServiceImpl.check)."""
        return 0

    def transaction_check_reads_own_copies(self) -> bool:
        """Whether a check run reads on into the copies it wrote itself, discarding there one whose
        check count reached the maximum: a real 4.9.4 broker did, 6 ms after writing them (a race
        between the run and the consume-queue dispatch; docs/transactions.md)."""
        return True

    def timer_wheel(self) -> bool:
        """Whether the broker has timer messages (TIMER_DELAY_SEC/MS, TIMER_DELIVER_MS): 4.9.4 has
        none and stores such a message in its topic at once, its properties unread."""
        return False

    def pop_consumption(self) -> bool:
        """Whether the broker serves POP consumers (checkpoints, acks, revive): 4.9.4 has no POP."""
        return False

    def pop_revive_origin_group(self) -> bool:
        """Whether the revive service's retry record carries ``ORIGIN_GROUP`` (the checkpoint's
        group), put after ``1ST_POP_TIME``."""
        return False

    def timer_delete_key(self, topic: str, uniq_key: str) -> str:
        """A recall record's ``TIMER_DEL_UNIQKEY`` for a message of ``topic``: 5.3.3's
        ``TimerMessageStore.buildDeleteKey`` is ``<topic>+<uniqKey>`` (4.9.4 has no recall)."""
        return f"{topic}+{uniq_key}"


@dataclass(frozen=True)
class Semantics5x(Semantics):
    """RocketMQ 5.x (5.3.3) for 4.x-style clients: remoting push consumers, delay levels.

    Each method names the 5.3.3 source it follows; docs/rocketmq-5x.md has what a real 5.3.3
    broker showed. Timers within one roll window and the broker's side of POP are modelled."""

    def dlq_on_retry_topic_send(self, reconsume_times: int, max_reconsume_times: int) -> bool:
        """5.x compares with ``>``: a client retry whose RECONSUME_TIME reached the max is retried
        once more (BR/processor/SendMessageProcessor.handleRetryAndDLQ).

        5.x also diverts every such send of a group that holds queue locks (an orderly group,
        ``!isLockAllExpired(group)``); the model keeps no broker-side locks, and an orderly client
        sends only past its max with RECONSUME_TIME = max + 1, which ``>`` diverts all the same."""
        return reconsume_times > max_reconsume_times

    def retry_queue_id(self, rng: RandomSource, retry_queue_nums: int) -> int:
        """``this.random.nextInt(retryQueueNums)`` (BR/processor/AbstractSendMessageProcessor
        .consumerSendMsgBack): a uniform draw below n, not 4.9.4's ``nextInt(99999999) % n``."""
        assert retry_queue_nums > 0, f"retry_queue_nums must be positive, got {retry_queue_nums}"
        return rng.randrange(retry_queue_nums)

    def strip_wait_from_stored_properties(self) -> bool:
        """5.x stores the client's ``WAIT=true``: ``sendMessage`` serializes the whole map
        (BR/processor/SendMessageProcessor.sendMessage)."""
        return False

    def dlq_send_keeps_client_delay(self) -> bool:
        """5.x puts ``DELAY=-1`` into the map it stores, so the DLQ copy is never delayed
        (BR/processor/SendMessageProcessor.handleRetryAndDLQ)."""
        return False

    def send_back_store_host_from_message(self) -> bool:
        """5.x stores the send-back copy with this broker's own host, ``this.getStoreHost()``
        (BR/processor/AbstractSendMessageProcessor.consumerSendMsgBack)."""
        return False

    def properties_map_capacity(self) -> int:
        """``new HashMap<>(128)`` (CM/message/MessageDecoder.string2messageProperties)."""
        return PROPERTIES_MAP_CAPACITY_5X

    def properties_trailing_separator(self) -> bool:
        """Every pair is followed by ``\\x02``, the last one too
        (CM/message/MessageDecoder.messageProperties2String)."""
        return True

    def send_added_properties(self) -> tuple[tuple[str, str], ...]:
        """``buildMsgContext`` runs on every send and puts MSG_REGION and TRACE_ON into the
        properties it hands on (BR/processor/AbstractSendMessageProcessor.buildMsgContext)."""
        return ((PROP_MSG_REGION, REGION_ID_DEFAULT), (PROP_TRACE_SWITCH, TRACE_ON_DEFAULT))

    def orderly_send_back_reconsume_time(self, reconsume_times: int) -> int:
        """5.x clients add one (CL/impl/consumer/ConsumeMessageOrderlyService.sendMessageBack)."""
        return reconsume_times + 1

    def transaction_check_interval_ms_default(self) -> int:
        """``transactionCheckInterval``'s default: 30 s (CM/BrokerConfig.java)."""
        return TRANSACTION_CHECK_INTERVAL_MS_5X

    def half_carries_transaction_id(self) -> bool:
        """``parseHalfMessageInner`` puts ``__transactionId__`` = UNIQ_KEY before REAL_TOPIC
        (BR/transaction/queue/TransactionalMessageBridge.java); seen on a real 5.3.3 half."""
        return True

    def transaction_ops_batched(self) -> bool:
        """``deletePrepareMessage`` queues ``"<offset>,"`` per half queue and
        TransactionalOpBatchService writes them as one op record every transactionOpBatchInterval
        (BR/transaction/queue/TransactionalMessageServiceImpl.batchSendOpMessage)."""
        return True

    def transaction_check_sleep_without_op_ms(self) -> int:
        """``SLEEP_WHILE_NO_OP``: 1000 ms before the half is checked anyway (a real 5.3.3 broker's
        check runs with op records to read came 3 s apart at a 2 s interval)."""
        return 1000

    def transaction_check_reads_own_copies(self) -> bool:
        """A real 5.3.3 run stopped at the first copy it had written (not yet in the consume queue)
        and left the discard of a copy checked the maximum times to the next run
        (docs/transactions.md)."""
        return False

    def timer_wheel(self) -> bool:
        """``timerWheelEnable`` is on by default; the put hook sends a timer not yet due into
        ``rmq_sys_wheel_timer`` (BR/util/HookUtils.handleScheduleMessage, ST/timer/TimerMessageStore)."""
        return True

    def pop_consumption(self) -> bool:
        """POP is served by every 5.x broker (BR/processor/PopMessageProcessor, AckMessageProcessor,
        ChangeInvisibleTimeProcessor, PopReviveService); broker_core/broker/pop.py models it."""
        return True

    def unmodelled_faults(self) -> dict[str, str]:
        """A killed 5.x broker recovers by its own rules (a 40-byte checkpoint with masterFlushedOffset
        and confirmPhyOffset, ST/StoreCheckpoint.java; CommitLog.recoverAbnormally), which the model
        does not follow: its recovery is 4.9.4's. A clean restart is the same in both."""
        reason = ("the model recovers a killed broker as 4.9.4 does, and a 5.x broker's recovery "
                  "(its checkpoint's confirmPhyOffset) is not modelled")
        return {"broker_crash": reason, "torn_write": reason}


@dataclass(frozen=True)
class Semantics54(Semantics5x):
    """RocketMQ 5.4 and later: the 5.x rules, a client whose fallback keeps ORIGIN_MESSAGE_ID, and
    POP retry records that name their group."""

    def fallback_sets_origin_message_id(self) -> bool:
        """apache/rocketmq #9482 (in 5.4.0) copies the consumed message's properties first and
        sets ORIGIN_MESSAGE_ID after (its own, else the msgId): a real 5.5.0 client's retry of a
        refused send-back carried it."""
        return True

    def pop_revive_origin_group(self) -> bool:
        """5.4.0's PopReviveService.reviveRetry puts ``ORIGIN_GROUP`` = the checkpoint's group after
        ``1ST_POP_TIME`` (read from the 5.4.0, 5.5.0 and 5.5.1 broker jars' bytecode; 5.3.3's has
        none): real 5.5.1 brokers' POP retry records carried it."""
        return True

    def timer_delete_key(self, topic: str, uniq_key: str) -> str:
        """5.4.0 added ``appendTopicForTimerDeleteKey`` (default false) to ``buildDeleteKey``: the
        bare UNIQ_KEY (the 5.4.0 and 5.5.0 store jars' bytecode; a real 5.5.0 recall record)."""
        return uniq_key


SEMANTICS_4_9 = Semantics(version="4.9")
SEMANTICS_5_X = Semantics5x(version="5.x")
SEMANTICS_5_4 = Semantics54(version="5.4")

_BY_VERSION = {"4.9": SEMANTICS_4_9, "4.9.4": SEMANTICS_4_9, "5.x": SEMANTICS_5_X, "5.4": SEMANTICS_5_4}
SUPPORTED = ("4.9", "5.x", "5.4")
# The first 5.x minor release whose client keeps ORIGIN_MESSAGE_ID on its fallback send.
_FIRST_5_4_MINOR = 4


def semantics_for(version: str) -> Semantics:
    """The rule set for a broker version string ("4.9", "5.x"); any other version is rejected."""
    found = _BY_VERSION.get(str(version))
    if found is None:
        raise BadInputError(
            f"broker semantics {version!r} is not supported (supported: {', '.join(SUPPORTED)})",
            where="broker.semantics")
    return found


def semantics_of_release(release: str) -> str:
    """The model's rule set for a RocketMQ release number: "4.9" for 4.x, "5.x" for 5.0 to 5.3,
    "5.4" for 5.4 and later."""
    major, _, rest = str(release).partition(".")
    if major == "4":
        return "4.9"
    if major == "5":
        minor = rest.split(".", 1)[0]
        return "5.4" if minor.isdigit() and int(minor) >= _FIRST_5_4_MINOR else "5.x"
    raise BadInputError(f"the model has no rules for RocketMQ {release!r} (it knows 4.x and 5.x)",
                        where="--rocketmq")
