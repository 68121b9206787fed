"""The store's inline append paths write exactly the bytes ``codec.encode_record`` gives.

``MessageStore.put_message`` and ``put_messages`` pack the record header themselves (the hot path
of every run) with the codec's header struct; these tests drive each path and the codec on the
same generated inputs and require the same bytes, so the layout has one owner in behaviour too.
"""

from __future__ import annotations

import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker_core import codec
from broker_core.constants import PROPERTY_SEPARATOR, SYSFLAG_TRANSACTION_COMMIT
from broker_core.message import properties_to_string, string_to_properties
from broker_core.store.message_store import MessageBatchInner, MessageInner, MessageStore, StoreConfig

HOSTS = ["10.0.0.2:50000", "192.168.0.1:10911", "[2001:db8::7]:10911", "[::1]:9876"]
STORE_TS = 1_700_000_000_123
_WORD = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_", min_size=1, max_size=12)
_INT32 = st.integers(-(2**31), 2**31 - 1)
_INT64 = st.integers(-(2**63), 2**63 - 1)


def _props(prefix: str):
    """Well-formed properties (keys distinct, none the broker interprets), as a dict."""
    return st.dictionaries(_WORD.map(lambda k: f"{prefix}{k}"), _WORD, max_size=4)


def _open(root: str, store_host: str) -> MessageStore:
    store = MessageStore(root, StoreConfig(store_host=store_host, commitlog_file_size_bytes=1 << 20),
                         lambda: STORE_TS)
    assert store.load(), store.load_error
    store.start()
    return store


def _stored_bytes(store: MessageStore, phys: int, size: int) -> bytes:
    return bytes(store.commit_log.files.read(phys, size))


_SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_SETTINGS
@given(topic=_WORD, queue_id=st.integers(0, 7), body=st.binary(max_size=300), props=_props("u"),
       flag=_INT32, committed=st.booleans(), born_ts=_INT64, born_host=st.sampled_from(HOSTS),
       store_host=st.sampled_from(HOSTS + [None]), reconsume_times=_INT32, prepared_tx_offset=_INT64)
def test_put_message_writes_what_the_codec_encodes(topic, queue_id, body, props, flag, committed, born_ts,
                                                   born_host, store_host, reconsume_times,
                                                   prepared_tx_offset):
    """put_message stores, byte for byte, codec.encode_record of the same fields at the offsets it returns."""
    sys_flag = SYSFLAG_TRANSACTION_COMMIT if committed else 0
    with tempfile.TemporaryDirectory() as root:
        store = _open(root, HOSTS[1])
        try:
            result = store.put_message(MessageInner(
                topic, queue_id, body, dict(props), flag=flag, sys_flag=sys_flag, born_ts=born_ts,
                born_host=born_host, store_host=store_host, reconsume_times=reconsume_times,
                prepared_tx_offset=prepared_tx_offset))
            assert result.ok, result.detail
            stored = _stored_bytes(store, result.phys_offset, result.total_size)
        finally:
            store.shutdown()
    expected = codec.encode_record(codec.Record(
        topic, queue_id, flag, result.queue_offset, result.phys_offset, sys_flag, born_ts, born_host,
        result.store_ts, store_host or HOSTS[1], reconsume_times, prepared_tx_offset, body, dict(props)))
    assert stored == expected


@_SETTINGS
@given(topic=_WORD, queue_id=st.integers(0, 7),
       messages=st.lists(st.tuples(_INT32, st.binary(max_size=100), _props("u")), min_size=1, max_size=5),
       batch_props=_props("b"), born_ts=_INT64, born_host=st.sampled_from(HOSTS),
       store_host=st.sampled_from(HOSTS), reconsume_times=_INT32)
def test_put_messages_writes_what_the_codec_encodes(topic, queue_id, messages, batch_props, born_ts,
                                                    born_host, store_host, reconsume_times):
    """put_messages stores each message of a batch as codec.encode_record of its fields, its own
    properties followed by the batch's."""
    wire = codec.encode_batch_body((flag, body, properties_to_string(own)) for flag, body, own in messages)
    with tempfile.TemporaryDirectory() as root:
        store = _open(root, HOSTS[1])
        try:
            result = store.put_messages(MessageBatchInner(
                topic, queue_id, wire, dict(batch_props), born_ts=born_ts, born_host=born_host,
                store_host=store_host, reconsume_times=reconsume_times))
            assert result.ok, result.detail
            stored = _stored_bytes(store, result.phys_offsets[0], result.total_size)
        finally:
            store.shutdown()
    expected = b""
    for index, (flag, body, own) in enumerate(messages):
        own_text, batch_text = properties_to_string(own), properties_to_string(batch_props)
        joined = own_text + (PROPERTY_SEPARATOR if own_text and batch_text else "") + batch_text
        expected += codec.encode_record(codec.Record(
            topic, queue_id, flag, result.queue_offset + index, result.phys_offsets[index], 0, born_ts,
            born_host, result.store_ts, store_host, reconsume_times, 0, body,
            string_to_properties(joined)))
    assert stored == expected
