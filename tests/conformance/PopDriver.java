import java.lang.reflect.Field;
import java.util.Arrays;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.impl.consumer.DefaultMQPushConsumerImpl;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * Sends messages to a topic and consumes them with a RocketMQ 5.x remoting POP consumer (a
 * DefaultMQPushConsumer whose group the broker serves in POP mode), failing some deliveries, and
 * prints one JSON line per send and per listener call. Compiled against 5.x jars only.
 *
 * Arguments: namesrv brokerAddr topic group plan maxReconsumeTimes popDelaySec invisibleTimeMs
 * timeoutMs inFlightDelaySec. The plan is a comma-separated list of failure counts, one per message: message i
 * (keys pop-i) returns RECONSUME_LATER on its first plan[i] deliveries and CONSUME_SUCCESS after;
 * a count above maxReconsumeTimes means "always fail" (the client gives up at maxReconsumeTimes and
 * acks it). A negative count is a message still in flight at the end: it always fails, is sent
 * once every other message has ended, with the client's retry delay set to inFlightDelaySec
 * first, and the run stops soon after its first delivery, while the invisible time that failure
 * set is still running (unless inFlightDelaySec is short: then its retries may come back and it
 * may even reach maxReconsumeTimes and be given up). The run ends once every message was
 * acknowledged by the listener, given up by the client, or (in flight) delivered once, or at the
 * time limit.
 *
 * The 5.x POP client delays a failed message by its hard-wired popDelayLevel table (10 s, 30 s,
 * 60 s, ... 7200 s) through changePopInvisibleTime, and acks a message that reached
 * maxReconsumeTimes only once it is older than twice the table's last entry. The driver overwrites
 * that table (one array of the consumer, via reflection) with popDelaySec for every level, so a
 * retry comes back in seconds and the client gives up within the run; the broker's side is
 * untouched.
 */
public class PopDriver {
    static final long GIVE_UP_GRACE_MS = 4_000;  // the client's ack after giving up is asynchronous

    public static void main(String[] args) {
        DriverSupport.exitWith(() -> run(args));
    }

    static void send(DefaultMQProducer producer, String topic, int i, int failures) throws Exception {
        Message msg = new Message(topic, "pop", ("pop " + i + " fails " + failures).getBytes("UTF-8"));
        msg.setKeys("pop-" + i);
        long sentMs = System.currentTimeMillis();
        SendResult result = producer.send(msg);
        if (result.getSendStatus() != SendStatus.SEND_OK) {
            throw new IllegalStateException("send " + i + ": " + result);
        }
        PlanSupport.emit("{\"event\":\"send\",\"uniq_key\":\"" + result.getMsgId() + "\",\"keys\":\"pop-" + i
                + "\",\"failures\":" + failures + ",\"sent_ms\":" + sentMs
                + ",\"queue_id\":" + result.getMessageQueue().getQueueId()
                + ",\"queue_offset\":" + result.getQueueOffset()
                + ",\"broker\":\"" + result.getMessageQueue().getBrokerName() + "\"}");
    }

    static int run(String[] args) throws Exception {
        String namesrv = args[0], brokerAddr = args[1], topic = args[2], group = args[3];
        int[] failures = DriverSupport.failureCounts(args[4]);
        int maxReconsumeTimes = Integer.parseInt(args[5]);
        int popDelaySec = Integer.parseInt(args[6]);
        long invisibleTimeMs = Long.parseLong(args[7]);
        long timeoutMs = Long.parseLong(args[8]);
        int inFlightDelaySec = Integer.parseInt(args[9]);

        DriverSupport.createPopTopic(namesrv, brokerAddr, topic, 2, group);
        PlanSupport.emit("{\"event\":\"pop_mode\",\"topic\":\"" + topic + "\",\"group\":\"" + group + "\"}");

        Map<String, AtomicInteger> calls = new ConcurrentHashMap<>();
        // keys -> "acked" (listener succeeded) or "gave-up" (failed at maxReconsumeTimes).
        Map<String, String> ended = new ConcurrentHashMap<>();
        Map<String, Long> endedAt = new ConcurrentHashMap<>();
        // When the client last gave up on a message (the in-flight one too, if its retries came
        // back fast enough to reach maxReconsumeTimes before the run stopped).
        AtomicLong lastGiveUp = new AtomicLong();

        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName(group + "-c0");
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.setClientRebalance(false);  // ask the broker for the assignment: it answers POP
        consumer.setMaxReconsumeTimes(maxReconsumeTimes);
        consumer.setPopInvisibleTime(invisibleTimeMs);
        consumer.setPopBatchNums(4);
        consumer.setConsumeMessageBatchMaxSize(1);
        consumer.subscribe(topic, "*");
        Field table = DefaultMQPushConsumerImpl.class.getDeclaredField("popDelayLevel");
        table.setAccessible(true);
        int[] levels = (int[]) table.get(consumer.getDefaultMQPushConsumerImpl());
        Arrays.fill(levels, popDelaySec);
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            long now = System.currentTimeMillis();
            MessageExt m = msgs.get(0);
            String keys = m.getKeys();
            int index = Integer.parseInt(keys.substring(keys.indexOf('-') + 1));
            int call = calls.computeIfAbsent(keys, k -> new AtomicInteger()).incrementAndGet();
            boolean inFlight = failures[index] < 0;
            boolean fail = inFlight || call <= failures[index];
            String status = fail ? "RECONSUME_LATER" : "CONSUME_SUCCESS";
            String ck = m.getProperty(MessageConst.PROPERTY_POP_CK);
            StringBuilder line = new StringBuilder("{\"event\":\"consume\"");
            line.append(",\"keys\":\"").append(keys).append('"');
            line.append(",\"uniq_key\":\"").append(m.getMsgId()).append('"');
            line.append(",\"call\":").append(call);
            line.append(",\"topic\":\"").append(m.getTopic()).append('"');
            line.append(",\"queue_id\":").append(m.getQueueId());
            line.append(",\"queue_offset\":").append(m.getQueueOffset());
            line.append(",\"commit_log_offset\":").append(m.getCommitLogOffset());
            line.append(",\"reconsume_times\":").append(m.getReconsumeTimes());
            line.append(",\"store_ts\":").append(m.getStoreTimestamp());
            line.append(",\"pop_ck\":\"").append(ck == null ? "" : ck).append('"');
            line.append(",\"retry_topic\":\"").append(String.valueOf(m.getProperty(MessageConst.PROPERTY_RETRY_TOPIC))).append('"');
            line.append(",\"seen_ms\":").append(now);
            line.append(",\"status\":\"").append(status).append("\"}");
            PlanSupport.emit(line.toString());
            if (!fail) {
                ended.put(keys, "acked");
                endedAt.put(keys, now);
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            }
            if (m.getReconsumeTimes() >= maxReconsumeTimes) lastGiveUp.set(now);
            if (inFlight) {
                ended.putIfAbsent(keys, "in-flight");
                endedAt.putIfAbsent(keys, now);
            } else if (m.getReconsumeTimes() >= maxReconsumeTimes) {
                ended.put(keys, "gave-up");
                endedAt.put(keys, now);
            }
            return ConsumeConcurrentlyStatus.RECONSUME_LATER;
        });
        consumer.start();

        DefaultMQProducer producer = DriverSupport.startProducer(namesrv, group + "-producer");
        int settled = 0;
        for (int i = 0; i < failures.length; i++) {
            if (failures[i] >= 0) {
                send(producer, topic, i, failures[i]);
                settled++;
            }
        }
        long deadline = System.currentTimeMillis() + timeoutMs;
        while (ended.size() < settled && System.currentTimeMillis() < deadline) {
            Thread.sleep(100);
        }
        // Every other message has ended. The client decides a give-up's ack by the same table (a
        // message older than twice its last entry), so those acks go first; then the in-flight
        // message's failure sets its invisible time to inFlightDelaySec, and the broker stops while
        // it is still invisible.
        while (System.currentTimeMillis() - lastGiveUp.get() < GIVE_UP_GRACE_MS) {
            Thread.sleep(100);
        }
        Arrays.fill(levels, inFlightDelaySec);
        for (int i = 0; i < failures.length; i++) {
            if (failures[i] < 0) send(producer, topic, i, failures[i]);
        }
        while (ended.size() < failures.length && System.currentTimeMillis() < deadline) {
            Thread.sleep(100);
        }
        // The acks (after a success, and when the client gives up) and the changes of invisible
        // time are sent asynchronously after the listener returns: let them reach the broker.
        Thread.sleep(GIVE_UP_GRACE_MS + 2L * popDelaySec * 1000);
        // A give-up in that time (the in-flight message reaching maxReconsumeTimes): its ack too.
        while (System.currentTimeMillis() - lastGiveUp.get() < GIVE_UP_GRACE_MS) {
            Thread.sleep(100);
        }
        producer.shutdown();
        consumer.shutdown();
        StringBuilder done = new StringBuilder("{\"event\":\"done\",\"ended\":{");
        boolean first = true;
        for (Map.Entry<String, String> e : ended.entrySet()) {
            if (!first) done.append(',');
            first = false;
            done.append('"').append(e.getKey()).append("\":\"").append(e.getValue()).append('"');
        }
        done.append("},\"expected\":").append(failures.length).append('}');
        PlanSupport.emit(done.toString());
        return ended.size() == failures.length ? 0 : 3;
    }
}
