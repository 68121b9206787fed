"""RocketMQ's defaults and limits that the broker model shares across modules, with the source
each mirrors, and the simulation's global bounds.

Not every limit lives here. A value that one module alone uses is named in that module, beside the
code that applies it, with its unit and its reason or RocketMQ source in the same style: the flush
service's intervals (``broker/flush.py``), a client's defaults (``client/*.py``), a scenario
field's range (``sim/scenario.py``), a reader's window sizes (``store/reader.py``), the audit's
thresholds (``assets/audit.py``, ``assets/checks.py``). A name defined here is defined nowhere
else (``tests/broker_core/test_tidy.py``).

Units and qualifiers go last in a name (``delay_ms_max``). Section numbers (§) are those of
``docs/rocketmq-references.md``, which names the RocketMQ class each value comes from.
"""

# --- commit-log record (§1.2, §1.8) -------------------------------------------------------------
MESSAGE_MAGIC_CODE_V1 = 0xDAA320A7  # MessageDecoder.MESSAGE_MAGIC_CODE (4.9.4 and 5.x)
MESSAGE_MAGIC_CODE_V2 = 0xDAA320AB  # 5.x only: 2-byte topic length
BLANK_MAGIC_CODE = 0xCBD43194  # CommitLog.BLANK_MAGIC_CODE: end-of-file filler record
END_FILE_MIN_BLANK_LENGTH_BYTES = 8  # a message never ends closer than this to a file's end
PROPERTIES_LENGTH_BYTES_MAX = 32767  # Short.MAX_VALUE: the properties length is an int16
TOPIC_LENGTH_V1_BYTES_MAX = 127  # signed 1-byte topic length in a v1 record
TOPIC_LENGTH_V2_BYTES_MAX = 32767  # int16 topic length in a v2 record
BODY_SIZE_BYTES_MAX = 4 * 1024 * 1024  # MessageStoreConfig.maxMessageSize (body only, 4.9.4)
NAME_VALUE_SEPARATOR = "\x01"  # MessageDecoder.NAME_VALUE_SEPARATOR
PROPERTY_SEPARATOR = "\x02"  # MessageDecoder.PROPERTY_SEPARATOR

# sysFlag bits (§1.4, MessageSysFlag)
SYSFLAG_COMPRESSED = 0x1
SYSFLAG_MULTI_TAGS = 0x2
SYSFLAG_TRANSACTION_MASK = 0xC
SYSFLAG_TRANSACTION_PREPARED = 0x4
SYSFLAG_TRANSACTION_COMMIT = 0x8
SYSFLAG_TRANSACTION_ROLLBACK = 0xC
SYSFLAG_BORNHOST_V6 = 0x10
SYSFLAG_STOREHOST_V6 = 0x20
SYSFLAG_NEED_UNWRAP = 0x40  # 5.x MessageSysFlag.NEED_UNWRAP_FLAG: an inner batch, set with the next
SYSFLAG_INNER_BATCH = 0x80  # 5.x MessageSysFlag.INNER_BATCH_FLAG
SYSFLAG_COMPRESSION_TYPE_MASK = 0x700
COMPRESS_BODY_OVER_BYTES = 4096  # DefaultMQProducer.compressMsgBodyOverHowmuch
COMPRESS_ZLIB_LEVEL = 5  # producer default compress level

# --- files (§1.1, §2.1, §3.6) --------------------------------------------------------------------
COMMITLOG_FILE_SIZE_BYTES_DEFAULT = 1024 * 1024 * 1024  # mappedFileSizeCommitLog
CQ_UNIT_SIZE_BYTES = 20  # ConsumeQueue.CQ_STORE_UNIT_SIZE
CQ_UNITS_PER_FILE_DEFAULT = 300_000  # mappedFileSizeConsumeQueue / 20
FILE_NAME_DIGITS = 20  # UtilAll.offset2FileName
CHECKPOINT_FILE_SIZE_BYTES = 4096  # StoreCheckpoint, one OS page
CHECKPOINT_MIN_TIMESTAMP_SLACK_MS = 3000  # StoreCheckpoint.getMinTimestamp subtracts this
RECOVER_NORMAL_FILES_FROM_END = 3  # normal recovery starts at the third-last file (4.9.4)

# --- delay levels and the schedule service (§4) --------------------------------------------------
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"  # TopicValidator.RMQ_SYS_SCHEDULE_TOPIC
SCHEDULE_TOPIC_QUEUES = 18  # TopicConfigManager: SCHEDULE_TOPIC_QUEUE_NUM
MESSAGE_DELAY_LEVEL_DEFAULT = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
SCHEDULE_FIRST_DELAY_MS = 1000  # FIRST_DELAY_TIME
SCHEDULE_DELAY_FOR_A_WHILE_MS = 100  # DELAY_FOR_A_WHILE: poll period of each level (4.9.3+)
SCHEDULE_DELAY_FOR_A_PERIOD_MS = 10_000  # DELAY_FOR_A_PERIOD: after an exception
SCHEDULE_UNKNOWN_LEVEL_DELAY_MS = 1000  # computeDeliverTimestamp of a level not in the table
DELAY_OFFSET_FLUSH_INTERVAL_MS = 10_000  # flushDelayOffsetInterval

# --- retry and DLQ (§5) --------------------------------------------------------------------------
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
# 5.x POP retry topics: %RETRY%<group>_<topic> (v1, the default) or %RETRY%<group>+<topic> (v2,
# enableRetryTopicV2; KeyBuilder.buildPopRetryTopicV2). '+' is not legal in a group name
# (TopicValidator's name pattern), so a v2 name splits at its first '+'.
POP_RETRY_V2_SEPARATOR = "+"
POP_RETRY_V1_SEPARATOR = "_"  # KeyBuilder.buildPopRetryTopicV1

# --- 5.x timer messages and bookkeeping (docs/rocketmq-5x.md) -------------------------------------
TIMER_TOPIC = "rmq_sys_wheel_timer"  # TimerMessageStore.TIMER_TOPIC: every timer record and roll
SYSTEM_TOPIC_PREFIX = "rmq_sys_"  # TopicValidator.SYSTEM_TOPIC_PREFIX: broker bookkeeping topics
SYSTEM_GROUP_PREFIX = "CID_RMQ_SYS_"  # MixAll.CID_RMQ_SYS_PREFIX: the broker's own groups (POP revive)
PROP_TIMER_DEQUEUE_MS = "TIMER_DEQUEUE_MS"  # set on every record the timer puts (a roll or the delivery)
PROP_TIMER_OUT_MS = "TIMER_OUT_MS"  # the due time, rounded down to timerPrecisionMs
PROP_TIMER_ROLL_TIMES = "TIMER_ROLL_TIMES"  # set from the first roll on, 1, 2, ...
PROP_TIMER_ENQUEUE_MS = "TIMER_ENQUEUE_MS"  # the wheel's write time (rounded) when it took the record
PROP_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"  # client input: Message.setDeliverTimeMs (absolute ms)
PROP_TIMER_DELAY_SEC = "TIMER_DELAY_SEC"  # client input: Message.setDelayTimeSec
PROP_TIMER_DELAY_MS = "TIMER_DELAY_MS"  # client input: Message.setDelayTimeMs
# MessageStoreConfig defaults @5.3.3 (confirmed on a real broker, docs/rocketmq-5x.md).
TIMER_PRECISION_MS = 1000  # timerPrecisionMs: due times are rounded down to a whole slot
TIMER_MAX_DELAY_MS = 259_200 * 1000  # timerMaxDelaySec: a timer further ahead is refused
# timerRollWindowSlot: a timer at least this many slots (x timerPrecisionMs) ahead of the wheel's
# write time when the wheel takes it is parked one window (or half a window) ahead and rolled: put
# again into the timer topic with TIMER_ROLL_TIMES + 1 (TimerMessageStore.doEnqueue @5.3.3).
TIMER_ROLL_WINDOW_SLOT_DEFAULT = 172_800  # 2 days of 1 s slots
# TimerMessageStore's constructor replaces a window under 2 slots or over the wheel's 7 days of
# slots less TIMER_BLANK_SLOTS (60) with that maximum; the model takes only what the broker keeps.
TIMER_ROLL_WINDOW_SLOT_MIN = 2
TIMER_ROLL_WINDOW_SLOT_MAX = 7 * 24 * 3600 - 60  # TIMER_WHEEL_TTL_DAY x DAY_SECS - TIMER_BLANK_SLOTS
# TIMER_ENQUEUE_MS of a record the wheel took after its due slot had passed (putMessageToTimerWheel:
# delayTime < currWriteTimeMs): Long.MAX_VALUE, "never enqueued"; it is put at once.
TIMER_ENQUEUE_MS_NEVER = (1 << 63) - 1
# A recall (5.3.2+ recallMessage): a record in the timer topic with the recalled message's
# UNIQ_KEY and TIMER_DEL_UNIQKEY=<topic>+<uniqKey>; the wheel then drops the message (seen on 5.3.3).
PROP_TIMER_DEL_UNIQKEY = "TIMER_DEL_UNIQKEY"
RECALL_TAG = "_RECALL_TAG_"  # RecallMessageProcessor.RECALL_MESSAGE_TAG: the recall record's TAGS
RECALL_BODY = b"0"  # the recall record's body
PROP_BORN_TIMESTAMP = "BORN_TIMESTAMP"  # MessageConst.PROPERTY_BORN_TIMESTAMP: when the recall was made
PROP_TRACE_CONTEXT = "TRACE_CONTEXT"  # MessageConst.PROPERTY_TRACE_CONTEXT: empty on a recall record
# An inner batch (sysFlag INNER_BATCH 0x80 | NEED_UNWRAP 0x40, a topic with queue.type=BatchCQ):
# one record holding INNER_NUM messages at queue offsets INNER_BASE .. INNER_BASE+INNER_NUM-1.
PROP_INNER_NUM = "INNER_NUM"
PROP_INNER_BASE = "INNER_BASE"
# LMQ / multi-dispatch (RIP-28, 4.9.3+, a broker with enableMultiDispatch; docs/lineage.md "Fan-out"):
# the producer lists queues in INNER_MULTI_DISPATCH, the broker adds the queue offsets it gave the
# record in each (MultiDispatch.wrapMultiDispatch), both comma-separated (MixAll.MULTI_DISPATCH_QUEUE_SPLITTER).
# One record, one consume-queue unit per listed queue; a %LMQ% queue (MixAll.LMQ_PREFIX, with
# enableLmq) is always its queue 0 (consumequeue/%LMQ%name/0/).
PROP_INNER_MULTI_DISPATCH = "INNER_MULTI_DISPATCH"
PROP_INNER_MULTI_QUEUE_OFFSET = "INNER_MULTI_QUEUE_OFFSET"
MULTI_DISPATCH_SEPARATOR = ","
LMQ_PREFIX = "%LMQ%"
LMQ_QUEUE_ID = 0
# Set by the 5.x POP revive service on every retry record it writes (MessageConst.PROPERTY_FIRST_POP_TIME);
# a push consumer's send-back never sets it.
PROP_FIRST_POP_TIME = "1ST_POP_TIME"
PROP_ORIGIN_GROUP = "ORIGIN_GROUP"  # 5.4+: a POP retry record's group (PopReviveService.reviveRetry)
DLQ_QUEUES = 1  # DLQ_NUMS_PER_GROUP
RETRY_QUEUES_DEFAULT = 1  # SubscriptionGroupConfig.retryQueueNums
RETRY_MAX_TIMES_DEFAULT = 16  # SubscriptionGroupConfig.retryMaxTimes
RETRY_DELAY_LEVEL_BASE = 3  # delayLevel 0 from the client means 3 + reconsumeTimes
PERM_READ = 4
PERM_WRITE = 2
PERM_INHERIT = 1
DLQ_PERM = PERM_READ | PERM_WRITE  # 4.9.2+; PERM_WRITE only in 4.9.0-4.9.1
TOPIC_QUEUES_DEFAULT = 4  # DefaultMQProducer.defaultTopicQueueNums

# --- transactional messages (docs/transactions.md; BrokerConfig @4.9.4 and @5.3.3) ---------------
TRANSACTION_TIMEOUT_MS_DEFAULT = 6000  # transactionTimeOut: a half younger than this is not checked
TRANSACTION_CHECK_MAX_DEFAULT = 15  # transactionCheckMax: the copy checked this often is discarded
TRANSACTION_CHECK_INTERVAL_MS_4_9 = 60_000  # transactionCheckInterval in 4.9.4
TRANSACTION_CHECK_INTERVAL_MS_5X = 30_000  # transactionCheckInterval in 5.x
TRANSACTION_OP_BATCH_INTERVAL_MS_DEFAULT = 3000  # transactionOpBatchInterval (5.x op batches)

# --- consumer (§6) -------------------------------------------------------------------------------
PULL_BATCH_SIZE_DEFAULT = 32
CONSUME_MESSAGE_BATCH_MAX_SIZE_DEFAULT = 1
CONSUME_TIMEOUT_MS_DEFAULT = 15 * 60 * 1000  # consumeTimeout = 15 minutes
CLEAN_EXPIRED_MSGS_PER_PASS_MAX = 16  # ProcessQueue.cleanExpiredMsg checks at most 16 heads
CLEAN_EXPIRED_DELAY_LEVEL = 3  # cleanExpiredMsg sends back at level 3
SEND_BACK_LOCAL_RETRY_MS = 5000  # submitConsumeRequestLater after a failed send-back
OFFSET_PERSIST_INTERVAL_MS = 5000  # persistConsumerOffsetInterval (client) and broker flush
OFFSET_PERSIST_INITIAL_DELAY_MS = 10_000
SUSPEND_CURRENT_QUEUE_MS_DEFAULT = 1000  # orderly suspendCurrentQueueTimeMillis
SUSPEND_CURRENT_QUEUE_MS_MIN = 10
SUSPEND_CURRENT_QUEUE_MS_MAX = 30_000
ORDERLY_MAX_RECONSUME_TIMES_UNLIMITED = 2**31 - 1  # Integer.MAX_VALUE
PULL_THRESHOLD_FOR_QUEUE_DEFAULT = 1000

# --- producer (§7) -------------------------------------------------------------------------------
SEND_MSG_TIMEOUT_MS = 3000
SEND_RETRY_TIMES_SYNC = 2  # retryTimesWhenSendFailed: at most 3 attempts
SEND_RETRY_TIMES_ASYNC = 2

# --- names (§8) ----------------------------------------------------------------------------------
TOPIC_NAME_LENGTH_MAX = 127  # 4.9.4 topic limit (also the v1 record field)
GROUP_NAME_LENGTH_MAX = 255  # 4.9.4 client checkGroup CHARACTER_MAX_LENGTH

# --- simulation bounds ---------------------------------------------------------------------------
SIM_EVENTS_MAX = 500_000_000  # a run that needs more events than this stops with a clear error
SIM_MESSAGES_MAX = 100_000_000  # a scenario asking for more messages is rejected at load
