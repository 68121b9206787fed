import java.nio.charset.StandardCharsets;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * The clients that write the DLedger store fixture (tests/conformance/make_dledger_fixture.py),
 * against RocketMQ 4.9.4 jars; one JSON line per send and per listener call on stdout.
 *
 *   topic   NAMESRV MASTER_ADDR TOPIC QUEUES          create the topic on the master, wait for its route
 *   play    NAMESRV TOPIC GROUP PREFIX COUNT IDLE_MS  a consumer, then COUNT sends; ends IDLE_MS after the
 *                                                     last listener call. Key i fails every attempt when
 *                                                     i % 4 == 0 (DLQ after 2 retries), its first when i % 5 == 0
 *   send    NAMESRV TOPIC PREFIX COUNT                COUNT sends, no client retry (a send the group cannot
 *                                                     commit fails: its entry stays uncommitted)
 */
public class DLedgerFixtureDriver {
    static final int MAX_RECONSUME_TIMES = 2;
    static final AtomicLong lastCall = new AtomicLong(0L);

    public static void main(String[] args) {
        DriverSupport.exitWith(() -> run(args));
    }

    static int run(String[] args) throws Exception {
        switch (args[0]) {
            case "topic": topic(args[1], args[2], args[3], Integer.parseInt(args[4])); break;
            case "play": play(args[1], args[2], args[3], args[4], Integer.parseInt(args[5]), Long.parseLong(args[6])); break;
            case "send": send(args[1], args[2], args[3], Integer.parseInt(args[4]), 0); break;
            default: throw new IllegalArgumentException(args[0]);
        }
        return 0;
    }

    static void topic(String namesrv, String master, String topic, int queues) throws Exception {
        DriverSupport.createTopic(namesrv, master, topic, queues);
        PlanSupport.emit("{\"ev\":\"topic\",\"topic\":\"" + topic + "\"}");
    }

    static void play(String namesrv, String topic, String group, String prefix, int count, long idleMs) throws Exception {
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName("fixture-consumer");
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.setPollNameServerInterval(1000);
        consumer.setMaxReconsumeTimes(MAX_RECONSUME_TIMES);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, context) -> {
            MessageExt m = msgs.get(0);
            String keys = String.valueOf(m.getKeys());
            int i = keys.contains("-") ? Integer.parseInt(keys.substring(keys.lastIndexOf('-') + 1)) : 1;
            boolean fail = i % 4 == 0 || (i % 5 == 0 && m.getReconsumeTimes() == 0);
            lastCall.set(System.currentTimeMillis());
            PlanSupport.emit("{\"ev\":\"consume\",\"keys\":\"" + m.getKeys() + "\",\"uniq_key\":\"" + m.getMsgId()
                + "\",\"topic\":\"" + m.getTopic() + "\",\"reconsume_times\":" + m.getReconsumeTimes()
                + ",\"phys_offset\":" + m.getCommitLogOffset() + ",\"status\":\"" + (fail ? "RECONSUME_LATER" : "CONSUME_SUCCESS") + "\"}");
            return fail ? ConsumeConcurrentlyStatus.RECONSUME_LATER : ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        Thread.sleep(3000);
        send(namesrv, topic, prefix, count, 2);
        long sent = System.currentTimeMillis();
        while (lastCall.get() < sent || System.currentTimeMillis() - lastCall.get() < idleMs) Thread.sleep(200);
        consumer.shutdown();
    }

    static void send(String namesrv, String topic, String prefix, int count, int retries) throws Exception {
        DefaultMQProducer producer = new DefaultMQProducer("fixture-producer");
        producer.setNamesrvAddr(namesrv);
        producer.setInstanceName("fixture-producer-" + prefix);
        producer.setPollNameServerInterval(1000);
        producer.setRetryTimesWhenSendFailed(retries);
        producer.start();
        for (int i = 0; i < count; i++) {
            String keys = prefix + "-" + i;
            Message msg = new Message(topic, "fixture", keys, (keys + " " + "x".repeat(60 + i % 40)).getBytes(StandardCharsets.UTF_8));
            StringBuilder sb = new StringBuilder("{\"ev\":\"send\",\"keys\":\"" + keys + "\"");
            try {
                SendResult r = producer.send(msg);
                sb.append(",\"status\":\"").append(r.getSendStatus().name()).append("\"");
                sb.append(",\"uniq_key\":\"").append(r.getMsgId()).append("\"");
                sb.append(",\"msg_id\":\"").append(r.getOffsetMsgId()).append("\"");
                sb.append(",\"queue_id\":").append(r.getMessageQueue().getQueueId());
                sb.append(",\"queue_offset\":").append(r.getQueueOffset());
            } catch (Exception e) {
                sb.append(",\"status\":\"FAILED\",\"error\":\"").append(String.valueOf(e).replace('"', '\'').replace("\n", " ")).append("\"");
            }
            PlanSupport.emit(sb.append("}").toString());
        }
        producer.shutdown();
    }
}
