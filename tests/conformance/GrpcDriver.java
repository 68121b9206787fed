import java.lang.reflect.Method;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.consumer.ConsumeResult;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.FilterExpressionType;
import org.apache.rocketmq.client.apis.consumer.PushConsumer;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.MessageBuilder;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.client.apis.producer.SendReceipt;
import org.apache.rocketmq.client.java.message.MessageViewImpl;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.remoting.protocol.admin.TopicStatsTable;
import org.apache.rocketmq.remoting.protocol.admin.TopicOffset;
import org.apache.rocketmq.remoting.protocol.subscription.CustomizedRetryPolicy;
import org.apache.rocketmq.remoting.protocol.subscription.ExponentialRetryPolicy;
import org.apache.rocketmq.remoting.protocol.subscription.GroupRetryPolicy;
import org.apache.rocketmq.remoting.protocol.subscription.GroupRetryPolicyType;
import org.apache.rocketmq.remoting.protocol.subscription.SubscriptionGroupConfig;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * Sends messages to a topic (a 5.x remoting producer, straight to the broker) and consumes them
 * with a gRPC client (rocketmq-client-java) through a 5.x proxy, failing some deliveries, and
 * prints one JSON line per send and per delivery the consumer got. Compiled against the 5.x
 * broker's jars (producer, admin) and the gRPC client's. Two modes:
 *
 * <p><b>simple</b> (the default) — arguments: namesrv brokerAddr proxyEndpoint topic group plan
 * retryMaxTimes invisibleMs awaitMs timeoutMs. A SimpleConsumer receives; a failure is no ack (the
 * message comes back once its invisible duration has passed). Message i has keys grpc-i.
 *
 * <p><b>push</b> — arguments: push namesrv brokerAddr proxyEndpoint timeoutMs, then one or more
 * groups of six: topic group retryMaxTimes policyType policyValues plan. Each group gets its own
 * topic and a PushConsumer whose listener returns FAILURE (the client then changes the message's
 * invisible duration by the retry policy the proxy gave it) or SUCCESS; all consume at once.
 * policyType is customized (policyValues: the next delays in ms, comma-separated, or "default"
 * for the broker's default table) or exponential (policyValues: initial,max,multiplier); with the
 * prefix fifo- (fifo-exponential) the group consumes in order (consumeMessageOrderly): the proxy
 * makes its client a FIFO consumer, which retries a failed message itself, by the policy, and at
 * maxAttempts forwards it to the DLQ through the proxy. Message i of a group has keys group-i.
 *
 * <p><b>produce</b> — arguments: produce namesrv brokerAddr proxyEndpoint normalTopic fifoTopic
 * delayTopic count delayMs. Creates the three topics with their message.type (NORMAL, FIFO, DELAY:
 * the proxy checks each send against it) and sends count messages to each with a gRPC Producer
 * through the proxy: keys topic-i, a FIFO one in message group fifo-(i % 2), a delayed one due
 * delayMs after its send (its deliveryTimestamp). One "send" line each; it ends once every delayed
 * message is due and DELAY_GRACE_MS more have passed, so the timer has delivered them.
 *
 * <p>In the consuming modes the group's retryMaxTimes (and, push, its groupRetryPolicy) is set on the
 * broker (subscriptionGroup.json) before the consumer starts: the proxy gives the client
 * maxAttempts = retryMaxTimes + 1 and the group's policy, and sends a message popped at reconsume
 * times >= maxAttempts to the DLQ instead of handing it out. A plan is a comma-separated list of
 * failure counts, one per message: message i fails its first plan[i] deliveries and succeeds after;
 * a count of maxAttempts or more means "always fails" (the proxy dead-letters it). A run ends once
 * every other message succeeded and each group's DLQ holds one record per always-failing message,
 * or at the time limit.
 */
public class GrpcDriver {
    static final long ACK_GRACE_MS = 3_000;  // the proxy acks a dead-lettered pop after the send-back
    static final long PUSH_POLL_MS = 500;  // how often the push mode looks whether its run is over
    static final int PUSH_CONSUMPTION_THREADS = 4;  // the listener returns at once; 20 by default
    static final int PUSH_ARGS_PER_GROUP = 6;
    static final String FIFO_PREFIX = "fifo-";
    static final long DELAY_GRACE_MS = 4_000;  // the timer's second of precision, the put, a margin  // a push group's policyType fifo-<type>: a FIFO group

    public static void main(String[] args) {
        if (args.length > 0 && args[0].equals("push")) {
            DriverSupport.exitWith(() -> runPush(Arrays.copyOfRange(args, 1, args.length)));
        } else if (args.length > 0 && args[0].equals("produce")) {
            DriverSupport.exitWith(() -> runProduce(Arrays.copyOfRange(args, 1, args.length)));
        } else {
            DriverSupport.exitWith(() -> run(args));
        }
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

    static int alwaysFailing(int[] failures, int maxAttempts) {
        return (int) Arrays.stream(failures).filter(f -> f >= maxAttempts).count();
    }

    /** Creates the topic (one queue) and the group with its retryMaxTimes, when not null its retry
     * policy, and whether it consumes in order (a FIFO group), on the broker (as mqadmin updateTopic /
     * updateSubGroup do). */
    static void createTopicAndGroup(DefaultMQAdminExt admin, String brokerAddr, String topic, String group,
                                    int retryMaxTimes, GroupRetryPolicy policy, boolean fifo) throws Exception {
        DriverSupport.createTopic(admin, brokerAddr, DriverSupport.topicConfig(topic, 1));
        SubscriptionGroupConfig sub = new SubscriptionGroupConfig();
        sub.setGroupName(group);
        sub.setRetryMaxTimes(retryMaxTimes);
        if (policy != null) sub.setGroupRetryPolicy(policy);
        sub.setConsumeMessageOrderly(fifo);
        admin.createAndUpdateSubscriptionGroupConfig(brokerAddr, sub);
        String stored = admin.examineSubscriptionGroupConfig(brokerAddr, group).getGroupRetryPolicy().toString();
        PlanSupport.emit("{\"event\":\"group\",\"group\":\"" + group + "\",\"topic\":\"" + topic + "\",\"retry_max_times\":"
                + retryMaxTimes + ",\"group_retry_policy\":\"" + stored.replace("\"", "'") + "\"}");
    }

    /** Sends message i of the plan with keys prefix-i; one "send" line each. */
    static void sendPlan(DefaultMQProducer producer, String topic, String prefix, int[] failures) throws Exception {
        for (int i = 0; i < failures.length; i++) {
            String keys = prefix + "-" + i;
            Message msg = new Message(topic, "grpc", (keys + " fails " + failures[i]).getBytes("UTF-8"));
            msg.setKeys(keys);
            long sentMs = System.currentTimeMillis();
            SendResult result = producer.send(msg);
            if (result.getSendStatus() != SendStatus.SEND_OK) throw new IllegalStateException("send " + keys + ": " + result);
            PlanSupport.emit("{\"event\":\"send\",\"uniq_key\":\"" + result.getMsgId() + "\",\"keys\":\"" + keys
                    + "\",\"topic\":\"" + topic + "\",\"failures\":" + failures[i] + ",\"sent_ms\":" + sentMs
                    + ",\"queue_id\":" + result.getMessageQueue().getQueueId()
                    + ",\"queue_offset\":" + result.getQueueOffset() + "}");
        }
    }

    static int planIndex(String keys) {
        return Integer.parseInt(keys.substring(keys.lastIndexOf('-') + 1));
    }

    /** One "consume" line: what the consumer got in one delivery and what it did with it. */
    static String deliveryLine(String group, MessageView view, String keys, int call, long seenMs, String status) {
        MessageViewImpl impl = (MessageViewImpl) view;
        // The receipt handle is the broker's POP_CK plus the record's commit log offset (the proxy's).
        String handle = impl.getReceiptHandle();
        String[] parts = handle.split(" ");
        StringBuilder line = new StringBuilder("{\"event\":\"consume\"");
        line.append(",\"group\":\"").append(group).append('"');
        line.append(",\"keys\":\"").append(keys).append('"');
        line.append(",\"uniq_key\":\"").append(view.getMessageId()).append('"');
        line.append(",\"call\":").append(call);
        line.append(",\"topic\":\"").append(view.getTopic()).append('"');
        line.append(",\"delivery_attempt\":").append(view.getDeliveryAttempt());
        line.append(",\"queue_id\":").append(impl.getMessageQueue().getQueueId());
        line.append(",\"queue_offset\":").append(impl.getOffset());
        line.append(",\"commit_log_offset\":").append(parts[parts.length - 1]);
        line.append(",\"receipt_handle\":\"").append(handle).append('"');
        line.append(",\"seen_ms\":").append(seenMs);
        line.append(",\"status\":\"").append(status).append("\"}");
        return line.toString();
    }

    static ClientConfiguration clientConfiguration(String endpoint) {
        return ClientConfiguration.newBuilder()
                .setEndpoints(endpoint).enableSsl(false).setRequestTimeout(Duration.ofSeconds(5)).build();
    }

    static int run(String[] args) throws Exception {
        String namesrv = args[0], brokerAddr = args[1], endpoint = args[2], topic = args[3], group = args[4];
        int[] failures = DriverSupport.failureCounts(args[5]);
        int retryMaxTimes = Integer.parseInt(args[6]);
        long invisibleMs = Long.parseLong(args[7]);
        long awaitMs = Long.parseLong(args[8]);
        long timeoutMs = Long.parseLong(args[9]);
        int neverAcked = alwaysFailing(failures, retryMaxTimes + 1);

        DefaultMQAdminExt admin = DriverSupport.startAdmin(namesrv, group + "-admin");
        createTopicAndGroup(admin, brokerAddr, topic, group, retryMaxTimes, null, false);
        DefaultMQProducer producer = DriverSupport.startProducer(namesrv, group + "-producer");
        sendPlan(producer, topic, "grpc", failures);
        producer.shutdown();

        ClientServiceProvider provider = ClientServiceProvider.loadService();
        SimpleConsumer consumer = provider.newSimpleConsumerBuilder()
                .setClientConfiguration(clientConfiguration(endpoint))
                .setConsumerGroup(group)
                .setAwaitDuration(Duration.ofMillis(awaitMs))
                .setSubscriptionExpressions(Collections.singletonMap(topic, new FilterExpression("*", FilterExpressionType.TAG)))
                .build();

        Map<String, Integer> calls = new HashMap<>();
        Map<String, String> ended = new HashMap<>();
        long deadline = System.currentTimeMillis() + timeoutMs;
        long dlq = 0;
        while (System.currentTimeMillis() < deadline) {
            if (ended.size() == failures.length - neverAcked && (dlq = dlqRecords(admin, group)) >= neverAcked) break;
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
                String keys = view.getKeys().iterator().next();
                int call = calls.merge(keys, 1, Integer::sum);
                boolean fail = call <= failures[planIndex(keys)];
                PlanSupport.emit(deliveryLine(group, view, keys, call, now, fail ? "NOT_ACKED" : "ACKED"));
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
        PlanSupport.emit("{\"event\":\"done\",\"acked\":" + ended.size() + ",\"dlq_records\":" + dlq
                + ",\"expected_acked\":" + (failures.length - neverAcked) + ",\"expected_dlq\":" + neverAcked + "}");
        return ended.size() == failures.length - neverAcked && dlq >= neverAcked ? 0 : 3;
    }

    /** One push group of the push mode: its plan and what its consumer has done so far. */
    static final class PushGroup {
        final String topic, group;
        final int retryMaxTimes;
        final GroupRetryPolicy policy;
        final boolean fifo;
        final int[] failures;
        final Map<String, Integer> calls = new ConcurrentHashMap<>();
        final Set<String> succeeded = ConcurrentHashMap.newKeySet();
        PushConsumer consumer;

        PushGroup(String[] args, int at) {
            topic = args[at];
            group = args[at + 1];
            retryMaxTimes = Integer.parseInt(args[at + 2]);
            fifo = args[at + 3].startsWith(FIFO_PREFIX);
            policy = GrpcPlanDriver.parsePolicy(args[at + 3].substring(fifo ? FIFO_PREFIX.length() : 0), args[at + 4]);
            failures = DriverSupport.failureCounts(args[at + 5]);
        }

        int alwaysFailing() {
            return GrpcDriver.alwaysFailing(failures, retryMaxTimes + 1);
        }

        boolean over(DefaultMQAdminExt admin) {
            return succeeded.size() == failures.length - alwaysFailing() && dlqRecords(admin, group) >= alwaysFailing();
        }

        ConsumeResult consume(MessageView view) {
            long now = System.currentTimeMillis();
            String keys = view.getKeys().iterator().next();
            int call = calls.merge(keys, 1, Integer::sum);
            boolean fail = call <= failures[planIndex(keys)];
            PlanSupport.emit(deliveryLine(group, view, keys, call, now, fail ? "FAILURE" : "SUCCESS"));
            if (fail) return ConsumeResult.FAILURE;
            succeeded.add(keys);
            return ConsumeResult.SUCCESS;
        }
    }

    static int runPush(String[] args) throws Exception {
        String namesrv = args[0], brokerAddr = args[1], endpoint = args[2];
        long timeoutMs = Long.parseLong(args[3]);
        if ((args.length - 4) % PUSH_ARGS_PER_GROUP != 0 || args.length == 4) {
            throw new IllegalArgumentException("push groups come in " + PUSH_ARGS_PER_GROUP + " arguments each");
        }
        List<PushGroup> groups = new ArrayList<>();
        for (int at = 4; at < args.length; at += PUSH_ARGS_PER_GROUP) groups.add(new PushGroup(args, at));

        DefaultMQAdminExt admin = DriverSupport.startAdmin(namesrv, "push-admin");
        for (PushGroup g : groups) createTopicAndGroup(admin, brokerAddr, g.topic, g.group, g.retryMaxTimes, g.policy, g.fifo);
        DefaultMQProducer producer = DriverSupport.startProducer(namesrv, "push-producer");
        for (PushGroup g : groups) sendPlan(producer, g.topic, g.group, g.failures);
        producer.shutdown();

        ClientServiceProvider provider = ClientServiceProvider.loadService();
        for (PushGroup g : groups) {
            g.consumer = provider.newPushConsumerBuilder()
                    .setClientConfiguration(clientConfiguration(endpoint))
                    .setConsumerGroup(g.group)
                    .setConsumptionThreadCount(PUSH_CONSUMPTION_THREADS)
                    .setSubscriptionExpressions(Collections.singletonMap(g.topic, new FilterExpression("*", FilterExpressionType.TAG)))
                    .setMessageListener(g::consume)
                    .build();
        }
        long deadline = System.currentTimeMillis() + timeoutMs;
        boolean over = false;
        while (!over && System.currentTimeMillis() < deadline) {
            Thread.sleep(PUSH_POLL_MS);
            over = groups.stream().allMatch(g -> g.over(admin));
        }
        // The proxy's ack of a dead-lettered pop follows its send-back.
        Thread.sleep(ACK_GRACE_MS);
        for (PushGroup g : groups) {
            // The settings the proxy gave the client: its retry policy (the group's) and maxAttempts
            // (PushConsumerImpl is package-private, hence reflection).
            Method getter = g.consumer.getClass().getMethod("getPushConsumerSettings");
            getter.setAccessible(true);
            String settings = String.valueOf(getter.invoke(g.consumer));
            PlanSupport.emit("{\"event\":\"settings\",\"group\":\"" + g.group + "\",\"settings\":\"" + settings.replace("\"", "'") + "\"}");
            g.consumer.close();
        }
        StringBuilder done = new StringBuilder("{\"event\":\"done\",\"over\":").append(over).append(",\"groups\":{");
        for (PushGroup g : groups) {
            if (done.charAt(done.length() - 1) != '{') done.append(',');
            done.append('"').append(g.group).append("\":{\"succeeded\":").append(g.succeeded.size())
                    .append(",\"dlq_records\":").append(dlqRecords(admin, g.group)).append('}');
        }
        PlanSupport.emit(done.append("}}").toString());
        admin.shutdown();
        return over ? 0 : 3;
    }

    static int runProduce(String[] args) throws Exception {
        String namesrv = args[0], brokerAddr = args[1], endpoint = args[2];
        String[] topics = {args[3], args[4], args[5]};
        String[] types = {"NORMAL", "FIFO", "DELAY"};
        int count = Integer.parseInt(args[6]);
        long delayMs = Long.parseLong(args[7]);
        DefaultMQAdminExt admin = DriverSupport.startAdmin(namesrv, "produce-admin");
        for (int t = 0; t < topics.length; t++) {
            TopicConfig config = DriverSupport.topicConfig(topics[t], 1);
            config.setAttributes(Collections.singletonMap("+message.type", types[t]));
            DriverSupport.createTopic(admin, brokerAddr, config);
        }
        ClientServiceProvider provider = ClientServiceProvider.loadService();
        Producer producer = provider.newProducerBuilder()
                .setClientConfiguration(clientConfiguration(endpoint)).setTopics(topics).build();
        long lastDue = 0;
        for (int t = 0; t < topics.length; t++) {
            for (int i = 0; i < count; i++) {
                String keys = topics[t] + "-" + i;
                MessageBuilder builder = provider.newMessageBuilder().setTopic(topics[t]).setKeys(keys)
                        .setTag("grpc").setBody((keys + " from a gRPC producer").getBytes("UTF-8"));
                String messageGroup = null;
                Long due = null;
                if (types[t].equals("FIFO")) builder.setMessageGroup(messageGroup = "fifo-" + (i % 2));
                long sentMs = System.currentTimeMillis();
                if (types[t].equals("DELAY")) {
                    builder.setDeliveryTimestamp(due = sentMs + delayMs);
                    lastDue = Math.max(lastDue, due);
                }
                SendReceipt receipt = producer.send(builder.build());
                StringBuilder line = new StringBuilder("{\"event\":\"send\"");
                PlanSupport.field(line, "uniq_key", receipt.getMessageId().toString());
                PlanSupport.field(line, "keys", keys);
                PlanSupport.field(line, "topic", topics[t]);
                PlanSupport.field(line, "message_type", types[t]);
                PlanSupport.field(line, "message_group", messageGroup);
                PlanSupport.field(line, "due_ms", due);
                PlanSupport.field(line, "sent_ms", sentMs);
                PlanSupport.emit(line.append('}').toString());
            }
        }
        producer.close();
        Thread.sleep(Math.max(0, lastDue - System.currentTimeMillis()) + DELAY_GRACE_MS);
        admin.shutdown();
        PlanSupport.emit("{\"event\":\"done\",\"sent\":" + count * topics.length + "}");
        return 0;
    }
}
