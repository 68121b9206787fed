import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * Makes a RocketMQ 5.x broker write the record forms a 4.9.4 broker never writes, and prints one
 * JSON line per send, recall and delivery:
 *
 *   plain-0    a plain message (with enabledAppendPropCRC on the broker, every record ends in the
 *              __CRC32# property);
 *   retry-0    consumed with RECONSUME_LATER once, by a group whose name makes %RETRY%<group>
 *              longer than 127 bytes: the retry record is stored with the v2 magic;
 *   batch-0..n a batch send to a topic whose queue.type attribute is BatchCQ: one inner-batch
 *              record (sysFlag 0x40|0x80, INNER_NUM);
 *   timer-0    a timer message that is delivered;
 *   recall-0   a timer message recalled (5.3.2+ recallMessage) before its due time: never delivered.
 *
 * Arguments: namesrv brokerAddr topic batchTopic group batchSize recallDelaySec timeoutMs.
 * It stops once every message but the recalled one was delivered and the recalled one's due time
 * has passed by a margin, or after the time limit; exit code 0 only when all of that held.
 */
public class RecordFormsDriver {
    static final long RECALL_MARGIN_MS = 3_000;  // a recalled message must stay undelivered this long past its due time
    static final int RETRY_DELAY_LEVEL = 1;  // the broker's first delay level (the test sets 1s)
    static final int TIMER_DELAY_SEC = 2;
    static final int ROUTE_POLL_MS = 1_000;

    public static void main(String[] args) {
        DriverSupport.exitWith(() -> run(args));
    }

    static String sendLine(String keys, String kind, SendResult result, long sentMs) {
        return "{\"event\":\"send\",\"uniq_key\":\"" + result.getMsgId() + "\",\"keys\":\"" + keys
                + "\",\"kind\":\"" + kind + "\",\"topic\":\"" + result.getMessageQueue().getTopic()
                + "\",\"queue_id\":" + result.getMessageQueue().getQueueId()
                + ",\"queue_offset\":" + result.getQueueOffset()
                + ",\"offset_msg_id\":\"" + result.getOffsetMsgId() + "\",\"sent_ms\":" + sentMs + "}";
    }

    static int run(String[] args) throws Exception {
        String namesrv = args[0], brokerAddr = args[1], topic = args[2], batchTopic = args[3], group = args[4];
        int batchSize = Integer.parseInt(args[5]);
        int recallDelaySec = Integer.parseInt(args[6]);
        long timeoutMs = Long.parseLong(args[7]);

        DefaultMQAdminExt admin = DriverSupport.startAdmin(namesrv, "forms-admin");
        DriverSupport.createTopic(admin, brokerAddr, DriverSupport.topicConfig(topic, 2));
        TopicConfig batchConfig = DriverSupport.topicConfig(batchTopic, 1);
        Map<String, String> attributes = new HashMap<>();
        attributes.put("+queue.type", "BatchCQ");  // "+" adds the attribute (TopicAttributes)
        batchConfig.setAttributes(attributes);
        DriverSupport.createTopic(admin, brokerAddr, batchConfig);
        admin.shutdown();

        // Keyed by the message's keys: a batch's SendResult names the batch's own UNIQ_KEY, not
        // its messages'.
        Map<String, Boolean> pending = new ConcurrentHashMap<>();
        Map<String, Boolean> failedOnce = new ConcurrentHashMap<>();
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName("forms-c0");
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        // The retry topic is created by the first send-back; learn its route within a second, not
        // at the default 30 s poll of the name server.
        consumer.setPollNameServerInterval(ROUTE_POLL_MS);
        consumer.subscribe(topic, "*");
        consumer.subscribe(batchTopic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            long now = System.currentTimeMillis();
            boolean later = false;
            for (MessageExt m : msgs) {
                String keys = String.valueOf(m.getKeys());
                boolean fail = keys.startsWith("retry-") && failedOnce.putIfAbsent(keys, Boolean.TRUE) == null;
                later |= fail;
                PlanSupport.emit("{\"event\":\"consume\",\"uniq_key\":\"" + m.getMsgId() + "\",\"keys\":\"" + keys
                        + "\",\"topic\":\"" + m.getTopic() + "\",\"queue_id\":" + m.getQueueId()
                        + ",\"queue_offset\":" + m.getQueueOffset() + ",\"commit_log_offset\":" + m.getCommitLogOffset()
                        + ",\"sys_flag\":" + m.getSysFlag() + ",\"reconsume_times\":" + m.getReconsumeTimes()
                        + ",\"status\":\"" + (fail ? "LATER" : "OK") + "\",\"seen_ms\":" + now + "}");
                if (!fail) pending.remove(keys);
            }
            if (later) {
                ctx.setDelayLevelWhenNextConsume(RETRY_DELAY_LEVEL);
                return ConsumeConcurrentlyStatus.RECONSUME_LATER;
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();

        DefaultMQProducer producer = DriverSupport.startProducer(namesrv, "forms-producer");

        for (String keys : new String[] {"plain-0", "retry-0"}) {
            Message msg = new Message(topic, "forms", (keys + " body").getBytes("UTF-8"));
            msg.setKeys(keys);
            long sentMs = System.currentTimeMillis();
            SendResult result = check(producer.send(msg), keys);
            pending.put(keys, Boolean.TRUE);
            PlanSupport.emit(sendLine(keys, "plain", result, sentMs));
        }

        List<Message> batch = new ArrayList<>();
        for (int i = 0; i < batchSize; i++) {
            Message msg = new Message(batchTopic, "batch", ("batch " + i).getBytes("UTF-8"));
            msg.setKeys("batch-" + i);
            batch.add(msg);
            pending.put("batch-" + i, Boolean.TRUE);
        }
        long batchSentMs = System.currentTimeMillis();
        SendResult batchResult = check(producer.send(batch), "batch");
        // An inner batch's SendResult carries the batch's own UNIQ_KEY (the broker's batchUniqId).
        PlanSupport.emit("{\"event\":\"batch_send\",\"uniq_key\":\"" + batchResult.getMsgId() + "\",\"keys_prefix\":\"batch-\""
                + ",\"size\":" + batchSize + ",\"queue_id\":" + batchResult.getMessageQueue().getQueueId()
                + ",\"queue_offset\":" + batchResult.getQueueOffset()
                + ",\"offset_msg_id\":\"" + batchResult.getOffsetMsgId() + "\",\"sent_ms\":" + batchSentMs + "}");

        Message timer = new Message(topic, "forms", "timer-0 body".getBytes("UTF-8"));
        timer.setKeys("timer-0");
        timer.setDelayTimeSec(TIMER_DELAY_SEC);
        long timerSentMs = System.currentTimeMillis();
        SendResult timerResult = check(producer.send(timer), "timer-0");
        pending.put("timer-0", Boolean.TRUE);
        PlanSupport.emit(sendLine("timer-0", "timer", timerResult, timerSentMs));

        Message doomed = new Message(topic, "forms", "recall-0 body".getBytes("UTF-8"));
        doomed.setKeys("recall-0");
        doomed.setDelayTimeSec(recallDelaySec);
        long doomedSentMs = System.currentTimeMillis();
        SendResult doomedResult = check(producer.send(doomed), "recall-0");
        PlanSupport.emit(sendLine("recall-0", "timer", doomedResult, doomedSentMs));
        String handle = doomedResult.getRecallHandle();
        if (handle == null) throw new IllegalStateException("the broker gave recall-0 no recall handle");
        String recalledId = producer.recallMessage(topic, handle);
        PlanSupport.emit("{\"event\":\"recall\",\"keys\":\"recall-0\",\"uniq_key\":\"" + doomedResult.getMsgId()
                + "\",\"recalled_id\":\"" + recalledId + "\",\"handle\":\"" + handle + "\",\"recall_ms\":"
                + System.currentTimeMillis() + "}");

        long deadline = System.currentTimeMillis() + timeoutMs;
        long recallClear = doomedSentMs + recallDelaySec * 1000L + RECALL_MARGIN_MS;
        while ((!pending.isEmpty() || System.currentTimeMillis() < recallClear)
                && System.currentTimeMillis() < deadline) {
            Thread.sleep(100);
        }
        // Let the consumer commit its offsets to the broker before it shuts down.
        Thread.sleep(1000);
        producer.shutdown();
        consumer.shutdown();
        PlanSupport.emit("{\"event\":\"done\",\"pending\":" + pending.size() + "}");
        return pending.isEmpty() ? 0 : 3;
    }

    static SendResult check(SendResult result, String what) {
        if (result.getSendStatus() != SendStatus.SEND_OK) {
            throw new IllegalStateException("send " + what + ": " + result);
        }
        return result;
    }
}
