import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

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
 * Sends timer messages (RocketMQ 5.x: delay in seconds or milliseconds, or an absolute deliver
 * time) and one plain message to a topic, consumes them with a push consumer, and prints one JSON
 * line per send and per delivery. It stops once every message was delivered, or after the time
 * limit; only 5.x clients have the timer setters, so it is compiled against 5.x jars only.
 *
 * Arguments: namesrv brokerAddr topic group plan timeoutMs [lingerMs]. The topic (4 queues) is
 * created on the broker first. lingerMs (default 1000) is how long the consumer stays up after the
 * last delivery: past the client's 5 s persistConsumerOffsetInterval, every queue's offset has been
 * committed to the broker by then (the one-way commits of the shutdown itself can be lost). The plan is a comma-separated list of sends, each
 * kind:value with kind one of sec (setDelayTimeSec), ms (setDelayTimeMs), at (setDeliverTimeMs,
 * value in ms from now, may be negative) or plain (no timer, value ignored).
 */
public class TimerDriver {

    public static void main(String[] args) {
        DriverSupport.exitWith(() -> run(args));
    }

    static int run(String[] args) throws Exception {
        String namesrv = args[0], brokerAddr = args[1], topic = args[2], group = args[3];
        String[] plan = args[4].split(",");
        long timeoutMs = Long.parseLong(args[5]);
        long lingerMs = args.length > 6 ? Long.parseLong(args[6]) : 1000;
        DriverSupport.createTopic(namesrv, brokerAddr, topic, 4);
        Map<String, Boolean> pending = new ConcurrentHashMap<>();

        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName(group + "-c0");
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            long now = System.currentTimeMillis();
            for (MessageExt m : msgs) {
                StringBuilder line = new StringBuilder("{\"event\":\"consume\"");
                line.append(",\"uniq_key\":\"").append(m.getMsgId()).append('"');
                line.append(",\"topic\":\"").append(m.getTopic()).append('"');
                line.append(",\"queue_id\":").append(m.getQueueId());
                line.append(",\"queue_offset\":").append(m.getQueueOffset());
                line.append(",\"commit_log_offset\":").append(m.getCommitLogOffset());
                line.append(",\"reconsume_times\":").append(m.getReconsumeTimes());
                line.append(",\"store_ts\":").append(m.getStoreTimestamp());
                line.append(",\"seen_ms\":").append(now);
                line.append(",\"keys\":\"").append(m.getKeys()).append("\"}");
                PlanSupport.emit(line.toString());
                pending.remove(m.getMsgId());
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();

        DefaultMQProducer producer = DriverSupport.startProducer(namesrv, group + "-producer");
        for (int i = 0; i < plan.length; i++) {
            String[] kv = plan[i].split(":");
            String kind = kv[0];
            long value = Long.parseLong(kv[1]);
            Message msg = new Message(topic, "timer", ("timer " + i + " " + plan[i]).getBytes("UTF-8"));
            msg.setKeys("timer-" + i);
            long sentMs = System.currentTimeMillis();
            switch (kind) {
                case "sec": msg.setDelayTimeSec(value); break;
                case "ms": msg.setDelayTimeMs(value); break;
                case "at": msg.setDeliverTimeMs(sentMs + value); break;
                case "plain": break;
                default: throw new IllegalArgumentException("unknown send kind " + kind);
            }
            SendResult result = producer.send(msg);
            long ackedMs = System.currentTimeMillis();  // a relative timer's due time is the broker's receipt + delay
            if (result.getSendStatus() != SendStatus.SEND_OK) {
                throw new IllegalStateException("send " + i + ": " + result);
            }
            pending.put(result.getMsgId(), Boolean.TRUE);
            PlanSupport.emit("{\"event\":\"send\",\"uniq_key\":\"" + result.getMsgId() + "\",\"keys\":\"timer-" + i
                    + "\",\"kind\":\"" + kind + "\",\"value\":" + value + ",\"sent_ms\":" + sentMs + ",\"acked_ms\":" + ackedMs
                    + ",\"broker\":\"" + result.getMessageQueue().getBrokerName() + "\"}");
        }
        long deadline = System.currentTimeMillis() + timeoutMs;
        while (!pending.isEmpty() && System.currentTimeMillis() < deadline) {
            Thread.sleep(100);
        }
        // Let the consumer commit its offsets to the broker before it shuts down.
        Thread.sleep(lingerMs);
        producer.shutdown();
        consumer.shutdown();
        PlanSupport.emit("{\"event\":\"done\",\"pending\":" + pending.size() + "}");
        return pending.isEmpty() ? 0 : 3;
    }
}
