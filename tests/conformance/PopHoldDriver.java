import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * Leaves a POP message in flight: a RocketMQ 5.x remoting POP consumer acks the message "acked",
 * then pops "held", whose listener never returns, and the JVM halts without shutting the client
 * down, so the broker holds "held" popped and unacked until its invisible time is over. Prints one
 * JSON line per send and per listener call. Compiled against 5.x jars only.
 *
 * Arguments: namesrv brokerAddr topic group invisibleTimeMs timeoutMs (a limit on each wait).
 */
public class PopHoldDriver {
    static final long ACK_GRACE_MS = 3_000;  // the client's ack of "acked" is asynchronous

    public static void main(String[] args) {
        DriverSupport.exitWith(() -> run(args));
    }

    static int run(String[] args) throws Exception {
        String namesrv = args[0], brokerAddr = args[1], topic = args[2], group = args[3];
        long invisibleTimeMs = Long.parseLong(args[4]);
        long timeoutMs = Long.parseLong(args[5]);

        DriverSupport.createPopTopic(namesrv, brokerAddr, topic, 1, group);

        CountDownLatch acked = new CountDownLatch(1), held = new CountDownLatch(1);
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(namesrv);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.setClientRebalance(false);  // ask the broker for the assignment: it answers POP
        consumer.setPopInvisibleTime(invisibleTimeMs);
        consumer.setPopBatchNums(1);
        consumer.setConsumeMessageBatchMaxSize(1);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            MessageExt m = msgs.get(0);
            PlanSupport.emit("{\"event\":\"consume\",\"keys\":\"" + m.getKeys() + "\",\"uniq_key\":\"" + m.getMsgId()
                + "\",\"queue_offset\":" + m.getQueueOffset() + ",\"pop_ck\":\""
                + m.getProperty(MessageConst.PROPERTY_POP_CK) + "\",\"seen_ms\":" + System.currentTimeMillis() + "}");
            if ("held".equals(m.getKeys())) {
                held.countDown();
                try {
                    Thread.sleep(Long.MAX_VALUE);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }
            acked.countDown();
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();

        DefaultMQProducer producer = new DefaultMQProducer(group + "-producer");
        producer.setNamesrvAddr(namesrv);
        producer.start();
        for (String key : new String[] {"acked", "held"}) {
            Message msg = new Message(topic, "pop", key.getBytes("UTF-8"));
            msg.setKeys(key);
            SendResult result = producer.send(msg);
            PlanSupport.emit("{\"event\":\"send\",\"keys\":\"" + key + "\",\"uniq_key\":\"" + result.getMsgId()
                + "\",\"queue_offset\":" + result.getQueueOffset() + "}");
            if ("acked".equals(key) && !acked.await(timeoutMs, TimeUnit.MILLISECONDS)) return 3;
        }
        if (!held.await(timeoutMs, TimeUnit.MILLISECONDS)) return 3;
        Thread.sleep(ACK_GRACE_MS);
        PlanSupport.emit("{\"event\":\"done\"}");
        System.out.flush();
        // No shutdown: a consumer's shutdown would wait for the held listener.
        Runtime.getRuntime().halt(0);
        return 0;
    }
}
