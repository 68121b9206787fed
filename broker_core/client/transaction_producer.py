"""A transactional producer: ``TransactionMQProducer.sendMessageInTransaction`` and its listener.

As the 4.9.4 and 5.3.3 clients do (``DefaultMQProducerImpl.sendMessageInTransaction``,
``checkTransactionState``): the delay level is dropped ("ignore DelayTimeLevel parameter"),
``TRAN_MSG=true`` and ``PGROUP`` are added and the message is sent synchronously with the PREPARED
sysFlag (``sendKernelImpl``); after SEND_OK the listener's ``executeLocalTransaction`` answers, and
the answer goes to the broker as END_TRANSACTION (commit, rollback, or NOT for UNKNOW). Each check
the broker sends later is answered by ``checkLocalTransaction`` the same way.

What the listener answers is the application's; a scenario draws it per message (its
``transaction`` weight table) as a list of answers: the first to the execution, the n-th after it
to the n-th check, the last repeating (the plan's TRANSACTION field, conformance/driver/
PlanSupport.java, reads the same list). Every listener call is a ``transaction_calls`` row.
"""

from __future__ import annotations

import re

from broker_core.constants import SYSFLAG_TRANSACTION_COMMIT, SYSFLAG_TRANSACTION_ROLLBACK
from broker_core.errors import RetryAuditError
from broker_core.message import PROP_KEYS, PROP_PGROUP, PROP_TAGS, PROP_TRAN_MSG, PROP_UNIQ_KEY, PROP_WAIT

from .producer import SEND_FAILED, SEND_OK, Producer

# LocalTransactionState
COMMIT_MESSAGE = "COMMIT_MESSAGE"
ROLLBACK_MESSAGE = "ROLLBACK_MESSAGE"
UNKNOW = "UNKNOW"
LOCAL_STATES = (COMMIT_MESSAGE, ROLLBACK_MESSAGE, UNKNOW)
_END_TYPES = {COMMIT_MESSAGE: SYSFLAG_TRANSACTION_COMMIT, ROLLBACK_MESSAGE: SYSFLAG_TRANSACTION_ROLLBACK, UNKNOW: 0}
STAGE_EXECUTE = "execute"
STAGE_CHECK = "check"
# A scenario's decisions: commit or roll back at once, never decide ("unknown"), or answer UNKNOW
# until the n-th check and then commit or roll back ("commit@2").
DECISION_KINDS = {"commit": COMMIT_MESSAGE, "rollback": ROLLBACK_MESSAGE}
DECISION_UNKNOWN = "unknown"
DECISION_CHECK_MAX = 1000  # a decision at a later check than this is a typo: no broker checks that often
_DECISION = re.compile(r"(commit|rollback)(?:@([1-9][0-9]{0,3}))?|unknown")


def answers_of(decision: str) -> tuple[str, ...]:
    """The listener's answers for a scenario decision; ValueError names what is wrong with it."""
    m = _DECISION.fullmatch(decision) if isinstance(decision, str) else None
    if m is None:
        raise ValueError("is not a transaction decision (commit, rollback, unknown, commit@N, rollback@N)")
    if decision == DECISION_UNKNOWN:
        return (UNKNOW,)
    final = DECISION_KINDS[m.group(1)]
    at_check = int(m.group(2) or 0)
    if at_check > DECISION_CHECK_MAX:
        raise ValueError(f"decides at check {at_check}; at most {DECISION_CHECK_MAX}")
    return (UNKNOW,) * at_check + (final,)


class TransactionListener:
    """The application's TransactionListener of one producer group: answers by UNIQ_KEY."""

    def __init__(self, producer_group: str, sim, recorder):
        self.producer_group = producer_group
        self.sim = sim
        self.recorder = recorder
        self._answers: dict[str, tuple[str, ...]] = {}
        self._checks: dict[str, int] = {}

    def expect(self, uniq_key: str, answers: tuple[str, ...]) -> None:
        assert answers and all(a in LOCAL_STATES for a in answers), answers
        self._answers[uniq_key] = answers

    def answer(self, stage: str, uniq_key: str | None, phys_offset: int | None = None,
               queue_offset: int | None = None) -> str:
        """The answer to the execution or to the next check of ``uniq_key``, recorded; UNKNOW for
        a message this listener never sent (a check of another producer's message)."""
        if stage == STAGE_CHECK:
            n = self._checks[uniq_key] = self._checks.get(uniq_key, 0) + 1
        else:
            n = 0
        answers = self._answers.get(uniq_key, (UNKNOW,))
        state = answers[min(n, len(answers) - 1)]
        self.recorder.emit("transaction_calls", {
            "producer_group": self.producer_group, "uniq_key": uniq_key, "stage": stage, "check_times": n,
            "answer": state, "ts": self.sim.now(), "phys_offset": phys_offset, "queue_offset": queue_offset})
        return state


class TransactionProducer(Producer):
    """A ``TransactionMQProducer``: plain sends as a Producer, transactional ones through the listener."""

    def __init__(self, *args, listener: TransactionListener, **kwargs):
        super().__init__(*args, **kwargs)
        assert listener.producer_group == self.producer_group, "the listener is the producer group's"
        self.listener = listener
        # The producer's heartbeat tells the broker it can be asked about its group's halves.
        self.broker.register_transaction_checker(self.producer_group, self.check)

    def send_in_transaction(self, topic: str, body: bytes, *, tags: str | None = None, keys: str | None = None,
                            delay_level: int = 0, answers: tuple[str, ...]) -> str:
        """``sendMessageInTransaction``; returns the message's UNIQ_KEY whatever the outcome.
        ``delay_level`` is what the application asked for: the client drops it."""
        props: dict[str, str] = {}
        if tags:
            props[PROP_TAGS] = tags
        if keys:
            props[PROP_KEYS] = keys
        props[PROP_WAIT] = "true"
        uniq_key = self.uniq_keys.next(self.sim.now())
        props[PROP_UNIQ_KEY] = uniq_key
        props[PROP_TRAN_MSG] = "true"
        props[PROP_PGROUP] = self.producer_group
        self.listener.expect(uniq_key, answers)
        outcome = self.send_properties(topic, body, props, mode="sync")
        if outcome.ok:
            self.sent_ok += 1
        else:
            self.send_failed += 1
        if self.record_produced:
            self.recorder.emit("produced", {
                "uniq_key": uniq_key, "topic": topic, "queue_id": outcome.queue_id, "delay_level": delay_level,
                "send_ts": self.sim.now(), "status": SEND_OK if outcome.ok else SEND_FAILED,
                "msg_id": outcome.msg_id, "phys_offset": outcome.phys_offset, "attempts": outcome.attempts})
        if outcome.ok:
            # Only a send that stored the half reaches the listener (a failed one throws).
            state = self.listener.answer(STAGE_EXECUTE, uniq_key)
            self._end(state, outcome.phys_offset, outcome.queue_offset, from_check=False)
        return uniq_key

    def check(self, request) -> None:
        """``checkTransactionState``: the listener's answer about the copy the broker names."""
        state = self.listener.answer(STAGE_CHECK, request.uniq_key, request.phys_offset, request.queue_offset)
        self._end(state, request.phys_offset, request.queue_offset, from_check=True)

    def _end(self, state: str, phys_offset: int, queue_offset: int, *, from_check: bool) -> None:
        """END_TRANSACTION, a oneway request: lost without a word when the broker is down."""
        try:
            self.broker.end_transaction(self.producer_group, phys_offset, queue_offset, _END_TYPES[state],
                                        from_check)
        except RetryAuditError:
            pass
