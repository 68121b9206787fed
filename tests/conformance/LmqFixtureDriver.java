import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.PullStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * The clients that write the LMQ store fixture (tests/conformance/make_lmq_fixture.py) against a
 * RocketMQ 4.9.4 broker with enableLmq and enableMultiDispatch; one JSON line per send, per
 * listener call and per message pulled from an LMQ queue on stdout.
 *
 *   topic NAMESRV BROKER_ADDR TOPIC QUEUES        create the parent topic, wait for its route
 *   play  NAMESRV TOPIC GROUP COUNT IDLE_MS       a push consumer of the parent topic, then COUNT
 *                                                 sends: key i names INNER_MULTI_DISPATCH
 *                                                 "%LMQ%a,%LMQ%b" when i % 3 == 0, "%LMQ%a" when
 *                                                 i % 3 == 1, none otherwise. The group fails the
 *                                                 first attempt of i % 5 == 0 and every attempt of
 *                                                 i == 7 (DLQ after 1 retry); ends IDLE_MS after the
 *                                                 last listener call
 *   pull  NAMESRV TOPIC BROKER GROUP LMQ MAX      pull LMQ's queue 0 from offset 0 as GROUP, at most
 *                                                 MAX messages, and commit the offset reached
 */
public class LmqFixtureDriver {
    static final int MAX_RECONSUME_TIMES = 1;
    static final int PULL_BATCH = 8;
    static final long PULL_TIMEOUT_MS = 3000;
    static final AtomicLong lastCall = new AtomicLong(0L);

    public static void main(String[] args) {
        DriverSupport.exitWith(() -> run(args));
    }

    static int run(String[] args) throws Exception {
        switch (args[0]) {
            case "topic": topic(args[1], args[2], args[3], Integer.parseInt(args[4])); break;
            case "play": play(args[1], args[2], args[3], Integer.parseInt(args[4]), Long.parseLong(args[5])); break;
            case "pull": pull(args[1], args[2], args[3], args[4], args[5], Integer.parseInt(args[6])); break;
            default: throw new IllegalArgumentException(args[0]);
        }
        return 0;
    }

    static void topic(String namesrv, String broker, String topic, int queues) throws Exception {
        DriverSupport.createTopic(namesrv, broker, topic, queues);
        PlanSupport.emit("{\"ev\":\"topic\",\"topic\":\"" + topic + "\"}");
    }

    static String dispatchOf(int i) {
        switch (i % 3) {
            case 0: return "%LMQ%a,%LMQ%b";
            case 1: return "%LMQ%a";
            default: return null;
        }
    }

    static void play(String namesrv, String topic, String group, int count, long idleMs) throws Exception {
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName("lmq-fixture-consumer");
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.setPollNameServerInterval(1000);
        consumer.setMaxReconsumeTimes(MAX_RECONSUME_TIMES);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, context) -> {
            MessageExt m = msgs.get(0);
            String keys = String.valueOf(m.getKeys());
            int i = Integer.parseInt(keys.substring(keys.lastIndexOf('-') + 1));
            boolean fail = i == 7 || (i % 5 == 0 && m.getReconsumeTimes() == 0);
            lastCall.set(System.currentTimeMillis());
            PlanSupport.emit("{\"ev\":\"consume\",\"keys\":" + PlanSupport.quoted(keys) + ",\"uniq_key\":" + PlanSupport.quoted(m.getMsgId())
                + ",\"topic\":" + PlanSupport.quoted(m.getTopic()) + ",\"reconsume_times\":" + m.getReconsumeTimes()
                + ",\"phys_offset\":" + m.getCommitLogOffset()
                + ",\"status\":\"" + (fail ? "RECONSUME_LATER" : "CONSUME_SUCCESS") + "\"}");
            return fail ? ConsumeConcurrentlyStatus.RECONSUME_LATER : ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        Thread.sleep(3000);
        DefaultMQProducer producer = new DefaultMQProducer("lmq-fixture-producer");
        producer.setNamesrvAddr(namesrv);
        producer.setInstanceName("lmq-fixture-producer");
        producer.start();
        for (int i = 0; i < count; i++) {
            String keys = "k-" + i;
            Message msg = new Message(topic, "lmq", keys, (keys + " " + "x".repeat(40 + i % 20)).getBytes(StandardCharsets.UTF_8));
            String dispatch = dispatchOf(i);
            if (dispatch != null) {
                msg.putUserProperty("INNER_MULTI_DISPATCH", dispatch);
            }
            SendResult r = producer.send(msg);
            PlanSupport.emit("{\"ev\":\"send\",\"keys\":" + PlanSupport.quoted(keys) + ",\"dispatch\":" + PlanSupport.quoted(dispatch)
                + ",\"status\":\"" + r.getSendStatus().name() + "\",\"uniq_key\":" + PlanSupport.quoted(r.getMsgId())
                + ",\"msg_id\":" + PlanSupport.quoted(r.getOffsetMsgId()) + ",\"queue_id\":" + r.getMessageQueue().getQueueId()
                + ",\"queue_offset\":" + r.getQueueOffset() + "}");
        }
        producer.shutdown();
        long sent = System.currentTimeMillis();
        while (lastCall.get() < sent || System.currentTimeMillis() - lastCall.get() < idleMs) Thread.sleep(200);
        consumer.shutdown();
    }

    static void pull(String namesrv, String topic, String broker, String group, String lmq, int max) throws Exception {
        DefaultMQPullConsumer consumer = new DefaultMQPullConsumer(group);
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName("lmq-fixture-pull-" + group);
        consumer.start();
        try {
            // An LMQ is not in the name server: the parent topic's route gives the broker's address.
            consumer.getDefaultMQPullConsumerImpl().getRebalanceImpl().getmQClientFactory()
                .updateTopicRouteInfoFromNameServer(topic);
            MessageQueue mq = new MessageQueue(lmq, broker, 0);
            long offset = 0;
            int taken = 0;
            while (taken < max) {
                PullResult r = consumer.pull(mq, "*", offset, Math.min(PULL_BATCH, max - taken), PULL_TIMEOUT_MS);
                if (r.getPullStatus() != PullStatus.FOUND) {
                    PlanSupport.emit("{\"ev\":\"pull-end\",\"lmq\":" + PlanSupport.quoted(lmq) + ",\"status\":\"" + r.getPullStatus().name()
                        + "\",\"next_offset\":" + r.getNextBeginOffset() + ",\"max_offset\":" + r.getMaxOffset() + "}");
                    break;
                }
                List<MessageExt> found = r.getMsgFoundList();
                long at = offset;
                for (MessageExt m : found) {
                    PlanSupport.emit("{\"ev\":\"pulled\",\"group\":" + PlanSupport.quoted(group) + ",\"lmq\":" + PlanSupport.quoted(lmq)
                        + ",\"lmq_offset\":" + at++ + ",\"keys\":" + PlanSupport.quoted(m.getKeys())
                        + ",\"uniq_key\":" + PlanSupport.quoted(m.getMsgId()) + ",\"topic\":" + PlanSupport.quoted(m.getTopic())
                        + ",\"queue_id\":" + m.getQueueId() + ",\"queue_offset\":" + m.getQueueOffset()
                        + ",\"phys_offset\":" + m.getCommitLogOffset() + ",\"reconsume_times\":" + m.getReconsumeTimes()
                        + ",\"multi_queue_offset\":" + PlanSupport.quoted(m.getProperty("INNER_MULTI_QUEUE_OFFSET")) + "}");
                    taken++;
                }
                offset = r.getNextBeginOffset();
            }
            consumer.getOffsetStore().updateConsumeOffsetToBroker(mq, offset, false);
            PlanSupport.emit("{\"ev\":\"commit\",\"group\":" + PlanSupport.quoted(group) + ",\"lmq\":" + PlanSupport.quoted(lmq) + ",\"offset\":" + offset
                + ",\"taken\":" + taken + "}");
        } finally {
            consumer.shutdown();
        }
    }
}
