import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * Sends plain messages to a topic and consumes them with a push consumer whose listener fails
 * some of them: each message's kind says how often. "ok" succeeds at once, "retry" fails its
 * first delivery (one %RETRY% hop, then consumed), "dlq" fails every delivery (the broker puts it
 * in %DLQ%group after maxReconsumeTimes retries). Prints one JSON line per send and per listener
 * call, and stops once every message had its calls, or after the time limit.
 *
 * Arguments: namesrv brokerAddr topic group plan timeoutMs maxReconsumeTimes [lingerMs]. The plan
 * is a comma-separated list of kinds, one per message (keys tier-0, tier-1, ...). The topic (2
 * queues) is created on the broker first. lingerMs (default 6500) is how long the consumer stays
 * up after the last call: past the client's 5 s persistConsumerOffsetInterval.
 */
public class TieredDriver {

    public static void main(String[] args) {
        DriverSupport.exitWith(() -> run(args));
    }

    static int run(String[] args) throws Exception {
        String namesrv = args[0], brokerAddr = args[1], topic = args[2], group = args[3];
        String[] plan = args[4].split(",");
        long timeoutMs = Long.parseLong(args[5]);
        int maxReconsume = Integer.parseInt(args[6]);
        long lingerMs = args.length > 7 ? Long.parseLong(args[7]) : 6500;
        DriverSupport.createTopic(namesrv, brokerAddr, topic, 2);

        Map<String, String> kindOfKey = new ConcurrentHashMap<>();
        Map<String, AtomicInteger> calls = new ConcurrentHashMap<>();
        Map<String, Integer> callsWanted = new ConcurrentHashMap<>();
        for (int i = 0; i < plan.length; i++) {
            String kind = plan[i];
            int wanted;
            switch (kind) {
                case "ok": wanted = 1; break;
                case "retry": wanted = 2; break;
                case "dlq": wanted = maxReconsume + 1; break;
                default: throw new IllegalArgumentException("unknown message kind " + kind);
            }
            kindOfKey.put("tier-" + i, kind);
            callsWanted.put("tier-" + i, wanted);
            calls.put("tier-" + i, new AtomicInteger());
        }

        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName(group + "-c0");
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.setMaxReconsumeTimes(maxReconsume);
        consumer.setConsumeMessageBatchMaxSize(1);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            MessageExt m = msgs.get(0);
            String kind = kindOfKey.getOrDefault(m.getKeys(), "ok");
            boolean fail = "dlq".equals(kind) || ("retry".equals(kind) && m.getReconsumeTimes() == 0);
            StringBuilder line = new StringBuilder("{\"event\":\"consume\"");
            line.append(",\"uniq_key\":\"").append(m.getMsgId()).append('"');
            line.append(",\"topic\":\"").append(m.getTopic()).append('"');
            line.append(",\"queue_id\":").append(m.getQueueId());
            line.append(",\"queue_offset\":").append(m.getQueueOffset());
            line.append(",\"commit_log_offset\":").append(m.getCommitLogOffset());
            line.append(",\"reconsume_times\":").append(m.getReconsumeTimes());
            line.append(",\"status\":\"").append(fail ? "RECONSUME_LATER" : "CONSUME_SUCCESS").append('"');
            line.append(",\"keys\":\"").append(m.getKeys()).append("\"}");
            PlanSupport.emit(line.toString());
            AtomicInteger n = calls.get(m.getKeys());
            if (n != null) {
                n.incrementAndGet();
            }
            return fail ? ConsumeConcurrentlyStatus.RECONSUME_LATER : ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();

        DefaultMQProducer producer = DriverSupport.startProducer(namesrv, group + "-producer");
        for (int i = 0; i < plan.length; i++) {
            Message msg = new Message(topic, plan[i], ("tiered " + i + " " + plan[i]).getBytes("UTF-8"));
            msg.setKeys("tier-" + i);
            SendResult result = producer.send(msg);
            if (result.getSendStatus() != SendStatus.SEND_OK) {
                throw new IllegalStateException("send " + i + ": " + result);
            }
            PlanSupport.emit("{\"event\":\"send\",\"uniq_key\":\"" + result.getMsgId() + "\",\"keys\":\"tier-" + i
                    + "\",\"kind\":\"" + plan[i] + "\",\"offset_msg_id\":\"" + result.getOffsetMsgId()
                    + "\",\"queue_id\":" + result.getMessageQueue().getQueueId()
                    + ",\"queue_offset\":" + result.getQueueOffset() + "}");
        }
        long deadline = System.currentTimeMillis() + timeoutMs;
        while (System.currentTimeMillis() < deadline && pending(calls, callsWanted) > 0) {
            Thread.sleep(100);
        }
        // Let the consumer commit its offsets to the broker before it shuts down.
        Thread.sleep(lingerMs);
        producer.shutdown();
        consumer.shutdown();
        int left = pending(calls, callsWanted);
        PlanSupport.emit("{\"event\":\"done\",\"pending\":" + left + "}");
        return left == 0 ? 0 : 3;
    }

    static int pending(Map<String, AtomicInteger> calls, Map<String, Integer> wanted) {
        int left = 0;
        for (Map.Entry<String, Integer> e : wanted.entrySet()) {
            if (calls.get(e.getKey()).get() < e.getValue()) {
                left++;
            }
        }
        return left;
    }
}
