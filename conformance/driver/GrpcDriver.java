import java.time.Duration;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.FilterExpressionType;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.java.message.MessageViewImpl;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.remoting.protocol.admin.TopicStatsTable;
import org.apache.rocketmq.remoting.protocol.admin.TopicOffset;
import org.apache.rocketmq.remoting.protocol.subscription.SubscriptionGroupConfig;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * Sends messages to a topic (a 5.x remoting producer, straight to the broker) and consumes them
 * with a gRPC SimpleConsumer (rocketmq-client-java) through a 5.x proxy, failing some deliveries
 * (a failure is no ack: the message comes back once its invisible duration has passed), and
 * prints one JSON line per send and per delivery the consumer got. Compiled against the 5.x
 * broker's jars (producer, admin) and the gRPC client's.
 *
 * Arguments: namesrv brokerAddr proxyEndpoint topic group plan retryMaxTimes invisibleMs
 * awaitMs timeoutMs. The group's retryMaxTimes is set on the broker (subscriptionGroup.json) before
 * the consumer starts: the proxy gives the client maxAttempts = retryMaxTimes + 1 and sends a
 * message popped at reconsume times >= maxAttempts to the DLQ instead of handing it out. The plan
 * is a comma-separated list of failure counts, one per message: message i (keys grpc-i) is not
 * acked on its first plan[i] deliveries and acked after; a count of maxAttempts or more means
 * "never acked" (the proxy dead-letters it). The run ends once every other message was acked and
 * the group's DLQ holds one record per never-acked message, or at the time limit.
 */
public class GrpcDriver {
    static final long ACK_GRACE_MS = 3_000;  // the proxy acks a dead-lettered pop after the send-back

    public static void main(String[] args) {
        DriverSupport.exitWith(() -> run(args));
    }

    static void emit(String line) {
        DriverSupport.emit(line);
    }

    static long dlqRecords(DefaultMQAdminExt admin, String group) {
        try {
            TopicStatsTable stats = admin.examineTopicStats("%DLQ%" + group);
            long n = 0;
            for (TopicOffset o : stats.getOffsetTable().values()) n += o.getMaxOffset() - o.getMinOffset();
            return n;
        } catch (Exception e) {
            return 0;  // no DLQ topic yet
        }
    }

    static int run(String[] args) throws Exception {
        String namesrv = args[0], brokerAddr = args[1], endpoint = args[2], topic = args[3], group = args[4];
        String[] plan = args[5].split(",");
        int retryMaxTimes = Integer.parseInt(args[6]);
        long invisibleMs = Long.parseLong(args[7]);
        long awaitMs = Long.parseLong(args[8]);
        long timeoutMs = Long.parseLong(args[9]);
        int maxAttempts = retryMaxTimes + 1;
        int[] failures = new int[plan.length];
        int neverAcked = 0;
        for (int i = 0; i < plan.length; i++) {
            failures[i] = Integer.parseInt(plan[i]);
            if (failures[i] >= maxAttempts) neverAcked++;
        }

        DefaultMQAdminExt admin = DriverSupport.startAdmin(namesrv, group + "-admin");
        admin.createAndUpdateTopicConfig(brokerAddr, new TopicConfig(topic, 1, 1, 6));
        SubscriptionGroupConfig sub = new SubscriptionGroupConfig();
        sub.setGroupName(group);
        sub.setRetryMaxTimes(retryMaxTimes);
        admin.createAndUpdateSubscriptionGroupConfig(brokerAddr, sub);
        DriverSupport.waitForRoute(admin, topic);
        emit("{\"event\":\"group\",\"group\":\"" + group + "\",\"retry_max_times\":" + retryMaxTimes + "}");

        DefaultMQProducer producer = new DefaultMQProducer(group + "-producer");
        producer.setNamesrvAddr(namesrv);
        producer.setRetryTimesWhenSendFailed(5);
        producer.start();
        for (int i = 0; i < plan.length; i++) {
            Message msg = new Message(topic, "grpc", ("grpc " + i + " fails " + failures[i]).getBytes("UTF-8"));
            msg.setKeys("grpc-" + i);
            long sentMs = System.currentTimeMillis();
            SendResult result = producer.send(msg);
            if (result.getSendStatus() != SendStatus.SEND_OK) throw new IllegalStateException("send " + i + ": " + result);
            emit("{\"event\":\"send\",\"uniq_key\":\"" + result.getMsgId() + "\",\"keys\":\"grpc-" + i
                    + "\",\"failures\":" + failures[i] + ",\"sent_ms\":" + sentMs
                    + ",\"queue_id\":" + result.getMessageQueue().getQueueId()
                    + ",\"queue_offset\":" + result.getQueueOffset() + "}");
        }
        producer.shutdown();

        ClientServiceProvider provider = ClientServiceProvider.loadService();
        ClientConfiguration configuration = ClientConfiguration.newBuilder()
                .setEndpoints(endpoint).enableSsl(false).setRequestTimeout(Duration.ofSeconds(5)).build();
        SimpleConsumer consumer = provider.newSimpleConsumerBuilder()
                .setClientConfiguration(configuration)
                .setConsumerGroup(group)
                .setAwaitDuration(Duration.ofMillis(awaitMs))
                .setSubscriptionExpressions(Collections.singletonMap(topic, new FilterExpression("*", FilterExpressionType.TAG)))
                .build();

        Map<String, Integer> calls = new HashMap<>();
        Map<String, String> ended = new HashMap<>();
        long deadline = System.currentTimeMillis() + timeoutMs;
        long dlq = 0;
        while (System.currentTimeMillis() < deadline) {
            if (ended.size() == plan.length - neverAcked && (dlq = dlqRecords(admin, group)) >= neverAcked) break;
            List<MessageView> views;
            try {
                views = consumer.receive(16, Duration.ofMillis(invisibleMs));
            } catch (Exception e) {
                System.err.println("receive: " + e);
                Thread.sleep(200);
                continue;
            }
            for (MessageView view : views) {
                long now = System.currentTimeMillis();
                MessageViewImpl impl = (MessageViewImpl) view;
                String keys = view.getKeys().iterator().next();
                int index = Integer.parseInt(keys.substring(keys.indexOf('-') + 1));
                int call = calls.merge(keys, 1, Integer::sum);
                boolean fail = call <= failures[index];
                // The receipt handle is the broker's POP_CK plus the record's commit log offset (the proxy's).
                String handle = impl.getReceiptHandle();
                String[] parts = handle.split(" ");
                StringBuilder line = new StringBuilder("{\"event\":\"consume\"");
                line.append(",\"keys\":\"").append(keys).append('"');
                line.append(",\"uniq_key\":\"").append(view.getMessageId()).append('"');
                line.append(",\"call\":").append(call);
                line.append(",\"topic\":\"").append(view.getTopic()).append('"');
                line.append(",\"delivery_attempt\":").append(view.getDeliveryAttempt());
                line.append(",\"queue_id\":").append(impl.getMessageQueue().getQueueId());
                line.append(",\"queue_offset\":").append(impl.getOffset());
                line.append(",\"commit_log_offset\":").append(parts[parts.length - 1]);
                line.append(",\"receipt_handle\":\"").append(handle).append('"');
                line.append(",\"seen_ms\":").append(now);
                line.append(",\"status\":\"").append(fail ? "NOT_ACKED" : "ACKED").append("\"}");
                emit(line.toString());
                if (!fail) {
                    consumer.ack(view);
                    ended.put(keys, "acked");
                }
            }
        }
        // The proxy's ack of the dead-lettered pop follows its send-back.
        Thread.sleep(ACK_GRACE_MS);
        consumer.close();
        admin.shutdown();
        emit("{\"event\":\"done\",\"acked\":" + ended.size() + ",\"dlq_records\":" + dlq
                + ",\"expected_acked\":" + (plan.length - neverAcked) + ",\"expected_dlq\":" + neverAcked + "}");
        return ended.size() == plan.length - neverAcked && dlq >= neverAcked ? 0 : 3;
    }
}
