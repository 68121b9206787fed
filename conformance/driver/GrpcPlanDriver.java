// The conformance driver's gRPC side: real gRPC consumers (rocketmq-client-java SimpleConsumer and
// PushConsumer, through a 5.x proxy) playing the gRPC groups of a plan written by retry-audit,
// beside Driver.java, which creates the topics and groups, sends the messages and plays every
// other group. Compiled against the gRPC client's jars and the 5.x broker's (the admin client).
//
// Arguments: PLAN  PROXY_ENDPOINT. It reads from the plan (Driver.java documents it):
//   namesrv, broker        where the admin client sets each gRPC group's subscription group
//   group                  a gRPC group has four more fields after MAX_RECONSUME_TIMES ... TOPICS:
//                          INVISIBLE_MS  -  CLIENT(grpc-simple|grpc-push|grpc-fifo)  POLICY, and its
//                          MAX_RECONSUME_TIMES field holds the group's retryMaxTimes
//   verdict                the model's listener verdicts, keyed UNIQ_KEY/RECONSUME_TIMES/N
//   sidedir                where it writes "grpc.ready" once its consumers run: Driver.java sends
//                          nothing before (its stdout goes to SIDEDIR/grpc.out, whose listener
//                          calls count towards Driver.java's "every message is done")
// Every other line is Driver.java's. It runs until SIGTERM (a clean shutdown of its consumers).
// Output lines (stdout): {"ev":"group",...}, {"ev":"consume",...} (Driver.java's columns; the
// delivery's receipt handle as pop_ck), {"ev":"phase",...}.
import java.io.File;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.consumer.ConsumeResult;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.FilterExpressionType;
import org.apache.rocketmq.client.apis.consumer.PushConsumer;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.java.message.MessageViewImpl;
import org.apache.rocketmq.remoting.protocol.subscription.CustomizedRetryPolicy;
import org.apache.rocketmq.remoting.protocol.subscription.ExponentialRetryPolicy;
import org.apache.rocketmq.remoting.protocol.subscription.GroupRetryPolicy;
import org.apache.rocketmq.remoting.protocol.subscription.GroupRetryPolicyType;
import org.apache.rocketmq.remoting.protocol.subscription.SubscriptionGroupConfig;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

public class GrpcPlanDriver {
    static final String SUCCESS = "CONSUME_SUCCESS";
    // A receive's batch: the model's POP batch (DefaultMQPushConsumer.popBatchNums, 32).
    static final int SIMPLE_BATCH = 32;
    // A SimpleConsumer's long polling; the proxy's minimum is lowered to match (conformance/run.py).
    static final Duration SIMPLE_AWAIT = Duration.ofSeconds(2);
    static final int PUSH_CONSUMPTION_THREADS = 2;  // as the remoting consumers' consumeThreadMax
    static final long RECEIVE_BACKOFF_MS = 200;

    static String namesrv;
    static String sideDir;
    static final Map<String, String> brokers = new LinkedHashMap<>();
    static final List<String[]> groups = new ArrayList<>();
    static PlanSupport.Verdicts verdicts = new PlanSupport.Verdicts();
    static final Map<String, AtomicInteger> callsByKey = new ConcurrentHashMap<>();
    static final List<AutoCloseable> consumers = Collections.synchronizedList(new ArrayList<>());
    static volatile boolean stopping = false;

    public static void main(String[] args) {
        try {
            run(args[0], args[1]);
        } catch (Throwable e) {
            e.printStackTrace();
            System.exit(1);
        }
    }

    static void run(String planPath, String endpoint) throws Exception {
        long t0 = System.currentTimeMillis();
        readPlan(planPath);
        DefaultMQAdminExt admin = new DefaultMQAdminExt();
        admin.setNamesrvAddr(namesrv);
        admin.setInstanceName("conformance-grpc-admin");
        admin.start();
        for (String[] g : groups) {
            for (String addr : brokers.values()) configureGroup(admin, addr, g);
        }
        admin.shutdown();

        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            stopping = true;
            synchronized (consumers) {
                for (AutoCloseable c : consumers) {
                    try {
                        c.close();
                    } catch (Exception e) {
                        System.err.println("close: " + e);
                    }
                }
            }
            PlanSupport.emit("{\"ev\":\"phase\",\"name\":\"stopped\",\"elapsed_ms\":" + (System.currentTimeMillis() - t0) + "}");
        }));
        ClientServiceProvider provider = ClientServiceProvider.loadService();
        ClientConfiguration config = ClientConfiguration.newBuilder()
                .setEndpoints(endpoint).enableSsl(false).setRequestTimeout(Duration.ofSeconds(5)).build();
        for (String[] g : groups) {
            int n = Integer.parseInt(g[3]);
            for (int i = 0; i < n; i++) {
                if (g[9].equals("grpc-push") || g[9].equals("grpc-fifo")) startPush(provider, config, g, i);
                else startSimple(provider, config, g, i);
            }
        }
        // Driver.java sends nothing until the consumers run: the model's run from the start.
        Files.write(new File(sideDir, "grpc.ready").toPath(), new byte[0]);
        PlanSupport.emit("{\"ev\":\"phase\",\"name\":\"grpc_consumers\",\"elapsed_ms\":" + (System.currentTimeMillis() - t0) + "}");
        final Object forever = new Object();
        synchronized (forever) {
            while (true) forever.wait();
        }
    }

    /** The group's retryMaxTimes (the proxy gives the client maxAttempts = retryMaxTimes + 1),
     *  for a push group its retry policy, and for a FIFO group consumeMessageOrderly (the proxy
     *  then makes its push consumer a FIFO one), on the broker's subscription group, which
     *  Driver.java created (as mqadmin updateSubGroup does). */
    static void configureGroup(DefaultMQAdminExt admin, String addr, String[] g) throws Exception {
        SubscriptionGroupConfig sub = admin.examineSubscriptionGroupConfig(addr, g[0]);
        if (sub == null) {
            sub = new SubscriptionGroupConfig();
            sub.setGroupName(g[0]);
        }
        sub.setRetryMaxTimes(Integer.parseInt(g[4]));
        if (!"-".equals(g[10])) sub.setGroupRetryPolicy(parsePolicy(g[10]));
        sub.setConsumeMessageOrderly("grpc-fifo".equals(g[9]));
        admin.createAndUpdateSubscriptionGroupConfig(addr, sub);
        SubscriptionGroupConfig stored = admin.examineSubscriptionGroupConfig(addr, g[0]);
        StringBuilder sb = new StringBuilder("{\"ev\":\"group\"");
        PlanSupport.field(sb, "group", g[0]);
        PlanSupport.field(sb, "broker", addr);
        PlanSupport.field(sb, "retry_max_times", stored.getRetryMaxTimes());
        PlanSupport.field(sb, "group_retry_policy", String.valueOf(stored.getGroupRetryPolicy()));
        PlanSupport.emit(sb.append('}').toString());
    }

    /** ``exponential:INITIAL_MS,MAX_MS,MULTIPLIER`` or ``customized:MS,MS,...`` (conformance/plan.py). */
    static GroupRetryPolicy parsePolicy(String spec) {
        int colon = spec.indexOf(':');
        if (colon < 0) throw new IllegalArgumentException("retry policy: " + spec);
        return parsePolicy(spec.substring(0, colon), spec.substring(colon + 1));
    }

    /** The group retry policy of a type (``exponential``, ``customized``) and its values:
     * INITIAL_MS,MAX_MS,MULTIPLIER, or MS,MS,... (``default``: the delay-level table). The one
     * parser of a policy, tests/conformance/GrpcDriver.java's too. */
    static GroupRetryPolicy parsePolicy(String type, String values) {
        GroupRetryPolicy policy = new GroupRetryPolicy();
        if (type.equals("exponential")) {
            long[] v = Arrays.stream(values.split(",")).mapToLong(Long::parseLong).toArray();
            policy.setType(GroupRetryPolicyType.EXPONENTIAL);
            policy.setExponentialRetryPolicy(new ExponentialRetryPolicy(v[0], v[1], v[2]));
        } else if (type.equals("customized")) {
            policy.setType(GroupRetryPolicyType.CUSTOMIZED);
            if (!values.equals("default")) {
                policy.setCustomizedRetryPolicy(new CustomizedRetryPolicy(
                        Arrays.stream(values.split(",")).mapToLong(Long::parseLong).toArray()));
            }
        } else {
            throw new IllegalArgumentException("retry policy type: " + type);
        }
        return policy;
    }

    static Map<String, FilterExpression> subscriptions(String[] g) {
        Map<String, FilterExpression> out = new HashMap<>();
        for (String t : g[6].split(",")) out.put(t, new FilterExpression("*", FilterExpressionType.TAG));
        return out;
    }

    /** A PushConsumer: the listener returns the model's verdict; a failure makes the client change
     *  the message's invisible time to its retry policy's delay for the delivery attempt (a FIFO
     *  one consumes the message again after that delay, and forwards it to the DLQ at maxAttempts). */
    static void startPush(ClientServiceProvider provider, ClientConfiguration config, String[] g, int index)
            throws Exception {
        final String group = g[0], consumerId = group + "-c" + index, client = g[9];
        final long consumeMs = Long.parseLong(g[5]);
        PushConsumer c = provider.newPushConsumerBuilder()
                .setClientConfiguration(config)
                .setConsumerGroup(group)
                .setConsumptionThreadCount(PUSH_CONSUMPTION_THREADS)
                .setSubscriptionExpressions(subscriptions(g))
                .setMessageListener(view -> SUCCESS.equals(consume(group, consumerId, client, view, consumeMs))
                        ? ConsumeResult.SUCCESS : ConsumeResult.FAILURE)
                .build();
        consumers.add(c);
    }

    /** A SimpleConsumer in a thread of its own: receive, then each message's verdict; a success is
     *  acked, a failure is not (the message comes back once its invisible duration has passed). */
    static void startSimple(ClientServiceProvider provider, ClientConfiguration config, String[] g, int index)
            throws Exception {
        final String group = g[0], consumerId = group + "-c" + index;
        final long consumeMs = Long.parseLong(g[5]);
        final Duration invisible = Duration.ofMillis(Long.parseLong(g[7]));
        final SimpleConsumer c = provider.newSimpleConsumerBuilder()
                .setClientConfiguration(config)
                .setConsumerGroup(group)
                .setAwaitDuration(SIMPLE_AWAIT)
                .setSubscriptionExpressions(subscriptions(g))
                .build();
        consumers.add(c);
        Thread t = new Thread(() -> {
            while (!stopping) {
                List<MessageView> views;
                try {
                    views = c.receive(SIMPLE_BATCH, invisible);
                } catch (Exception e) {
                    if (stopping) return;
                    System.err.println(consumerId + " receive: " + e);
                    try { Thread.sleep(RECEIVE_BACKOFF_MS); } catch (InterruptedException ie) { return; }
                    continue;
                }
                for (MessageView view : views) {
                    if (stopping) return;
                    if (SUCCESS.equals(consume(group, consumerId, "grpc-simple", view, consumeMs))) {
                        try {
                            c.ack(view);
                        } catch (Exception e) {
                            System.err.println(consumerId + " ack " + view.getMessageId() + ": " + e);
                        }
                    }
                }
            }
        }, consumerId);
        t.setDaemon(true);
        t.start();
    }

    /** One listener call: the model's verdict for (group, message, attempt), one "consume" line. */
    static String consume(String group, String consumerId, String client, MessageView view, long consumeMs) {
        long start = System.currentTimeMillis();
        MessageViewImpl impl = (MessageViewImpl) view;
        String uniq = view.getMessageId().toString();
        // The proxy counts attempts from 1: the record's reconsume times + 1.
        int reconsumeTimes = view.getDeliveryAttempt() - 1;
        String key = uniq + "/" + reconsumeTimes;
        int nth = callsByKey.computeIfAbsent(group + "\t" + key, k -> new AtomicInteger()).getAndIncrement();
        // A call the model never made repeats the model's last verdict for that attempt.
        String status = verdicts.of(group, key, nth, SUCCESS);
        if (consumeMs > 0) {
            try { Thread.sleep(consumeMs); } catch (InterruptedException e) { Thread.currentThread().interrupt(); }
        }
        long end = System.currentTimeMillis();
        // The receipt handle is the broker's POP_CK (start offset, pop time, invisible time, revive
        // queue, topic mark, broker, queue id, queue offset) plus the record's commit log offset,
        // which the proxy appends: the queue the record was popped from, and which record it is.
        String handle = impl.getReceiptHandle();
        String[] parts = handle.split(" ");
        StringBuilder sb = new StringBuilder("{\"ev\":\"consume\"");
        PlanSupport.field(sb, "group", group);
        PlanSupport.field(sb, "consumer_id", consumerId);
        PlanSupport.field(sb, "model", "CLUSTERING");
        PlanSupport.field(sb, "broker", parts.length > 5 ? parts[5] : null);
        PlanSupport.field(sb, "queue_offset", parts.length > 7 ? Long.parseLong(parts[7]) : null);
        PlanSupport.field(sb, "msg_id", uniq);
        PlanSupport.field(sb, "offset_msg_id", null);
        PlanSupport.field(sb, "uniq_key", uniq);
        PlanSupport.field(sb, "topic", view.getTopic());
        PlanSupport.field(sb, "reconsume_times", reconsumeTimes);
        PlanSupport.field(sb, "delivery_attempt", view.getDeliveryAttempt());
        PlanSupport.field(sb, "commit_log_offset", Long.parseLong(parts[parts.length - 1]));
        PlanSupport.field(sb, "born_ts", view.getBornTimestamp());
        PlanSupport.field(sb, "start_ts", start);
        PlanSupport.field(sb, "end_ts", end);
        PlanSupport.field(sb, "status", status);
        PlanSupport.field(sb, "mode", "POP");
        PlanSupport.field(sb, "client", client);
        PlanSupport.field(sb, "send_back_refused", 0);
        PlanSupport.field(sb, "pop_ck", handle);
        PlanSupport.emit(sb.append('}').toString());
        return status;
    }

    static void readPlan(String path) throws Exception {
        PlanSupport.Plan plan = PlanSupport.readPlan(path);
        namesrv = plan.namesrv;
        sideDir = plan.sideDir;
        brokers.putAll(plan.brokers);
        // Only the gRPC groups: Driver.java plays the others.
        for (String[] g : plan.groups) if (g.length > 9 && g[9].startsWith("grpc")) groups.add(g);
        verdicts = plan.verdicts;
        if (sideDir == null) throw new IllegalArgumentException("the plan names no sidedir");
    }
}
