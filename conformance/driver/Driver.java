// The conformance driver: real RocketMQ clients (DefaultMQProducer, DefaultMQPushConsumer) playing a
// plan written by retry-audit, printing one JSON line per send result and per listener call.
//
// The plan is a tab-separated text file (no JSON library: the driver compiles against any
// RocketMQ client version, whose bundled JSON libraries differ). Lines:
//   namesrv  ADDR
//   broker   NAME  ADDR
//   topic    NAME  QUEUES_PER_BROKER
//   group    NAME  MODEL(CLUSTERING|BROADCASTING)  MODE(CONCURRENTLY|ORDERLY|POP)  CONSUMERS
//            MAX_RECONSUME_TIMES  CONSUME_TIME_MS  TOPIC[,TOPIC...]  [INVISIBLE_MS  DELAY_S[,DELAY_S...]]
//            POP (5.x only): the broker serves the group by POP on each of its topics, and the
//            client pops with that invisible time and that retry delay table (see startConsumer)
//            [CLIENT  POLICY]  a gRPC group (CLIENT grpc-simple|grpc-push; MAX_RECONSUME_TIMES
//            holds its retryMaxTimes, DELAY_S is -): GrpcPlanDriver.java plays it through the
//            proxy; this driver creates its subscription group and waits for SIDEDIR/grpc.ready
//            before it sends (see awaitGrpcConsumers)
//   verdict  GROUP  KEY  STATUS      KEY is UNIQ_KEY/RECONSUME_TIMES/N (clustering) or
//                                    UNIQ_KEY/CONSUMER_INDEX/N (broadcasting), N counting the
//                                    calls with that key from 0 (a redelivery after a crash is
//                                    the next N); absent = success; DLQ_REQUESTED (a concurrent
//                                    listener) sets the context's delay level to -1 and returns
//                                    RECONSUME_LATER: the broker puts the message in the DLQ
//   refuse   GROUP  KEY          (KEY as for verdict) the model's broker refused this attempt's
//                                send-back: the real one is made to refuse it too, and the client
//                                falls back to sending the retry itself (see refuseSendBack)
//   msg      AT_MS  PRODUCER  PRODUCER_GROUP  TOPIC  TAGS|-  KEYS  DELAY_LEVEL  UNIQ_KEY  BODY_HEAD  BODY_SIZE
//            TIMER_DELAY_MS  RECALL(1: recall the timer message as soon as it is sent; 5.3.2+ clients)
//            TRANSACTION  - for a plain send; else the local transaction's answers (PlanSupport.
//                         TransactionAnswers): the message goes through sendMessageInTransaction of
//                         a TransactionMQProducer (a producer with such a message is one), whose
//                         listener answers the execution and each broker check in turn
//   expect   GROUP  UNIQ_KEY  CALLS  the listener calls after which (GROUP, UNIQ_KEY) is done
//   setting  NAME  VALUE         idle_ms, timeout_ms, start_wait_ms; trace 1: every client with
//                                message trace on (enableMsgTrace: its Pub, SubBefore, SubAfter and
//                                EndTransaction records go to RMQ_SYS_TRACE_TOPIC)
//   side     GROUP  INDEX        a consumer run in a process of its own (so it can be SIGKILLed):
//                                the main driver skips it, `Driver PLAN --only GROUP INDEX` runs it
//   sidedir  DIR                 where those processes' stdout files are: their listener calls
//                                count towards the main driver's "every message is done"; while
//                                DIR/outage.hold exists (a killed broker not yet started again),
//                                the clients do not stop, and their idle time counts from its end
// Output lines (stdout): {"ev":"send",...}, {"ev":"consume",...}, {"ev":"txn",...} (a transaction
// listener's execution or check), {"ev":"phase",...}, {"ev":"done",...}.
import java.io.BufferedReader;
import java.io.FileReader;
import java.nio.charset.StandardCharsets;
import java.util.*;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueAveragely;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyContext;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyContext;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.client.producer.TransactionSendResult;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageAccessor;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.common.protocol.heartbeat.MessageModel;
import org.apache.rocketmq.common.subscription.SubscriptionGroupConfig;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

public class Driver {
    static String namesrv;
    static final Map<String, String> brokers = new LinkedHashMap<>();
    static final List<String[]> topics = new ArrayList<>();
    static final List<String[]> groups = new ArrayList<>();
    static PlanSupport.Verdicts verdicts = new PlanSupport.Verdicts();
    static final List<String[]> msgs = new ArrayList<>();
    static final Map<String, Integer> expectCalls = new HashMap<>();
    static final Map<String, AtomicInteger> calls = new ConcurrentHashMap<>();
    static final Map<String, AtomicInteger> callsByKey = new ConcurrentHashMap<>();
    static final Map<String, Long> settings = new HashMap<>();
    static final Set<String> sides = new HashSet<>();
    static final Set<String> refusals = new HashSet<>();
    // A commit-log offset no broker of the test holds: CONSUMER_SEND_MSG_BACK looks the message up
    // by the offset the client sends (lookMessageByOffset) and answers SYSTEM_ERROR when it finds
    // nothing, which makes DefaultMQPushConsumerImpl.sendMessageBack fall back to its own send.
    static final long REFUSED_OFFSET = 1L << 50;
    // How long the name server may take to route a topic created on every broker. A 5.3.3 run once
    // sent 85 of its 86 messages into "No route info of this topic" within 6 s of creating them.
    static final long ROUTE_WAIT_MS = 60_000L;
    // The real offsets of the messages refuseSendBack changed: a message whose send-back and
    // fallback both failed is consumed again (the same object), and its record is still that one.
    static final Map<MessageExt, Long> refusedOffsets = Collections.synchronizedMap(new IdentityHashMap<>());
    static String sideDir;
    static final String HOLD_FILE = "outage.hold";
    // How long the gRPC consumers may take to start (a JVM, the admin's updates, each client's
    // session with the proxy): a limit, for a proxy that never answers.
    static final long GRPC_READY_WAIT_MS = 120_000L;
    static final Map<String, String> MODES = new HashMap<>();
    // The plan's transactional messages (UNIQ_KEY -> the listener's answers), the producers that
    // send them, and how often the broker has checked each message so far.
    static final Map<String, PlanSupport.TransactionAnswers> transactions = new HashMap<>();
    static final Set<Integer> transactionalProducers = new HashSet<>();
    static final Map<String, AtomicInteger> checks = new ConcurrentHashMap<>();

    public static void main(String[] args) {
        // Client threads are not daemons: any failure must still end the process.
        try {
            if (args.length == 4 && "--only".equals(args[1])) {
                runOne(args[0], args[2], Integer.parseInt(args[3]));
                return;
            }
            run(args[0]);
        } catch (Throwable e) {
            e.printStackTrace();
            System.exit(1);
        }
        System.exit(0);
    }

    static void run(String planPath) throws Exception {
        readPlan(planPath);
        long idleMs = settings.getOrDefault("idle_ms", 15000L);
        long timeoutMs = settings.getOrDefault("timeout_ms", 180000L);
        long startWaitMs = settings.getOrDefault("start_wait_ms", 3000L);
        long t0 = System.currentTimeMillis();

        DefaultMQAdminExt admin = new DefaultMQAdminExt();
        admin.setNamesrvAddr(namesrv);
        admin.setInstanceName("conformance-admin");
        admin.start();
        for (Map.Entry<String, String> b : brokers.entrySet()) {
            for (String[] t : topics) {
                int q = Integer.parseInt(t[1]);
                admin.createAndUpdateTopicConfig(b.getValue(), new TopicConfig(t[0], q, q, 6));
            }
            for (String[] g : groups) {
                SubscriptionGroupConfig sg = new SubscriptionGroupConfig();
                sg.setGroupName(g[0]);
                int max = Integer.parseInt(g[4]);
                if (max >= 0) sg.setRetryMaxTimes(max);
                sg.setConsumeBroadcastEnable(true);
                admin.createAndUpdateSubscriptionGroupConfig(b.getValue(), sg);
            }
        }
        waitForRoutes();
        for (String b : brokers.values()) {
            for (String[] g : groups) {
                if (!"POP".equals(g[2]) || isGrpc(g)) continue;
                for (String t : g[6].split(",")) PlanSupport.servePop(admin, b, t, g[0]);
            }
        }
        phase("admin", t0);

        List<DefaultMQPushConsumer> consumers = new ArrayList<>();
        for (String[] g : groups) {
            int n = Integer.parseInt(g[3]);
            for (int i = 0; i < n; i++) {
                if (!isGrpc(g) && !sides.contains(g[0] + "\t" + i)) consumers.add(startConsumer(g, i));
            }
        }
        awaitGrpcConsumers();
        Thread.sleep(startWaitMs);
        phase("consumers", t0);

        Map<Integer, DefaultMQProducer> producers = new TreeMap<>();
        long sendStart = System.currentTimeMillis();
        for (String[] m : msgs) {
            long at = Long.parseLong(m[0]);
            long wait = sendStart + at - System.currentTimeMillis();
            if (wait > 0) Thread.sleep(wait);
            int p = Integer.parseInt(m[1]);
            DefaultMQProducer producer = producers.get(p);
            if (producer == null) {
                producer = transactionalProducers.contains(p) ? transactionalProducer(m[2]) : plainProducer(m[2]);
                producer.setNamesrvAddr(namesrv);
                producer.setInstanceName("producer-" + p);
                // A plan may shorten the route refresh (default 30 s): after a DLedger group elects
                // a new master, sends reach it once the producer has read the new route.
                if (settings.containsKey("route_poll_ms")) {
                    producer.setPollNameServerInterval(settings.get("route_poll_ms").intValue());
                }
                producer.start();
                producers.put(p, producer);
            }
            send(producer, p, m);
        }
        phase("sent", t0);

        // The clients stop once no listener anywhere was called for idle_ms (more than twice the
        // longest delay level): a retry still in the schedule, or a record a crash made the broker
        // hand out again, is consumed before the end, whether or not the model's call counts were
        // reached ("complete" when they were). A plan may keep them running until min_run_ms after
        // the first send whatever the listeners do (after a DLedger master is killed, no listener is
        // called until the consumers' pulls it held time out).
        long minRunMs = settings.getOrDefault("min_run_ms", 0L);
        String reason = "timeout";
        while (System.currentTimeMillis() - t0 < timeoutMs) {
            Thread.sleep(200);
            long lastCall = Math.max(Math.max(PlanSupport.LAST_EMIT_MS.get(), lastSideCallMs()), heldUntilMs());
            if (System.currentTimeMillis() - sendStart < minRunMs) continue;
            if (System.currentTimeMillis() - lastCall > idleMs) {
                reason = allDone() ? "complete" : "idle";
                break;
            }
        }
        for (DefaultMQPushConsumer c : consumers) c.shutdown();
        for (DefaultMQProducer p : producers.values()) p.shutdown();
        admin.shutdown();
        PlanSupport.emit("{\"ev\":\"done\",\"reason\":\"" + reason + "\",\"elapsed_ms\":" + (System.currentTimeMillis() - t0) + "}");
    }

    // One consumer in a process of its own: runs until SIGTERM (a clean shutdown that persists its
    // offsets) or SIGKILL (a crash).
    static void runOne(String planPath, String group, int index) throws Exception {
        readPlan(planPath);
        String[] spec = null;
        for (String[] g : groups) if (g[0].equals(group)) spec = g;
        if (spec == null) throw new IllegalArgumentException("no group " + group + " in the plan");
        final DefaultMQPushConsumer c = startConsumer(spec, index);
        final Object stop = new Object();
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            c.shutdown();
            PlanSupport.emit("{\"ev\":\"phase\",\"name\":\"stopped\",\"elapsed_ms\":0}");
        }));
        PlanSupport.emit("{\"ev\":\"phase\",\"name\":\"started\",\"elapsed_ms\":0}");
        synchronized (stop) {
            while (true) stop.wait();
        }
    }

    // Whether the plan turns message trace on for every client (setting trace 1).
    static boolean traced() {
        return settings.getOrDefault("trace", 0L) == 1L;
    }

    // A producer of plain messages; with trace on, by the constructor every release keeps.
    static DefaultMQProducer plainProducer(String group) {
        return traced() ? new DefaultMQProducer(null, group, null, true, null) : new DefaultMQProducer(group);
    }

    // A gRPC group of the plan: GrpcPlanDriver.java consumes it through the proxy.
    static boolean isGrpc(String[] g) {
        return g.length > 9 && g[9].startsWith("grpc");
    }

    // The gRPC consumers start in a JVM of their own (started once this one printed its "admin"
    // phase), which writes SIDEDIR/grpc.ready when they run: no message is sent before, as in the
    // model, whose consumers are there from the start.
    static void awaitGrpcConsumers() throws Exception {
        boolean any = false;
        for (String[] g : groups) any |= isGrpc(g);
        if (!any) return;
        java.io.File ready = new java.io.File(sideDir, "grpc.ready");
        long deadline = System.currentTimeMillis() + GRPC_READY_WAIT_MS;
        while (!ready.exists()) {
            if (System.currentTimeMillis() > deadline) {
                throw new IllegalStateException("the gRPC consumers did not start within " + GRPC_READY_WAIT_MS + " ms");
            }
            Thread.sleep(100);
        }
    }

    static boolean allDone() {
        Map<String, Integer> outside = sideCalls();
        for (Map.Entry<String, Integer> e : expectCalls.entrySet()) {
            AtomicInteger c = calls.get(e.getKey());
            int n = (c == null ? 0 : c.get()) + outside.getOrDefault(e.getKey(), 0);
            if (n < e.getValue()) return false;
        }
        return true;
    }

    // When a consumer in a process of its own last printed a listener call (its file's mtime).
    static long lastSideCallMs() {
        if (sideDir == null) return 0L;
        java.io.File[] files = new java.io.File(sideDir).listFiles((d, n) -> n.endsWith(".out"));
        long last = 0L;
        if (files != null) for (java.io.File f : files) last = Math.max(last, f.lastModified());
        return last;
    }

    // Now, while the player holds the clients (DIR/outage.hold: a killed broker is not yet started
    // again, and its records are still to be handed out); else when the hold was last seen.
    static long heldMs = 0L;

    static long heldUntilMs() {
        if (sideDir != null && new java.io.File(sideDir, HOLD_FILE).exists()) heldMs = System.currentTimeMillis();
        return heldMs;
    }

    // Listener calls printed by the consumers that run in processes of their own.
    static Map<String, Integer> sideCalls() {
        Map<String, Integer> out = new HashMap<>();
        if (sideDir == null) return out;
        java.io.File[] files = new java.io.File(sideDir).listFiles((d, n) -> n.endsWith(".out"));
        if (files == null) return out;
        java.util.regex.Pattern group = java.util.regex.Pattern.compile("\"group\":\"([^\"]*)\"");
        java.util.regex.Pattern uniq = java.util.regex.Pattern.compile("\"uniq_key\":\"([^\"]*)\"");
        for (java.io.File f : files) {
            try (BufferedReader r = new BufferedReader(new FileReader(f, StandardCharsets.UTF_8))) {
                String line;
                while ((line = r.readLine()) != null) {
                    if (!line.startsWith("{\"ev\":\"consume\"") || !line.endsWith("}")) continue;
                    java.util.regex.Matcher g = group.matcher(line), u = uniq.matcher(line);
                    if (g.find() && u.find()) out.merge(g.group(1) + "\t" + u.group(1), 1, Integer::sum);
                }
            } catch (java.io.IOException e) {
                // a file being written: counted on the next look
            }
        }
        return out;
    }

    /** Waits until the name server routes every topic to every broker, so no send meets a topic
     *  without a route; fails after ROUTE_WAIT_MS. */
    static void waitForRoutes() throws Exception {
        DefaultMQProducer probe = new DefaultMQProducer("conformance-route-probe");
        probe.setNamesrvAddr(namesrv);
        probe.setInstanceName("conformance-route-probe");
        probe.start();
        try {
            long deadline = System.currentTimeMillis() + ROUTE_WAIT_MS;
            for (String[] t : topics) {
                while (true) {
                    Set<String> routed = new HashSet<>();
                    try {
                        for (MessageQueue mq : probe.fetchPublishMessageQueues(t[0])) routed.add(mq.getBrokerName());
                    } catch (Exception e) {
                        // no route yet
                    }
                    if (routed.containsAll(brokers.keySet())) break;
                    if (System.currentTimeMillis() > deadline) {
                        throw new IllegalStateException("the name server routes topic " + t[0] + " to " + routed
                            + " only, not to every broker " + brokers.keySet() + ", after " + ROUTE_WAIT_MS + " ms");
                    }
                    Thread.sleep(100);
                }
            }
        } finally {
            probe.shutdown();
        }
    }

    static void phase(String name, long t0) {
        PlanSupport.emit("{\"ev\":\"phase\",\"name\":\"" + name + "\",\"elapsed_ms\":" + (System.currentTimeMillis() - t0) + "}");
    }

    static void send(DefaultMQProducer producer, int p, String[] m) {
        byte[] body = body(m[8], Integer.parseInt(m[9]));
        Message msg = new Message(m[3], "-".equals(m[4]) ? null : m[4], m[5], body);
        int level = Integer.parseInt(m[6]);
        if (level > 0) msg.setDelayTimeLevel(level);
        // A 5.x timer message: what Message.setDelayTimeMs writes (set as a property, so the driver
        // compiles against 4.x clients too; the plan names timers only for 5.x releases).
        if (m.length > 10 && !"0".equals(m[10])) MessageAccessor.putProperty(msg, "TIMER_DELAY_MS", m[10]);
        // The plan names each message's UNIQ_KEY (the model's), so both sides agree on it; the
        // client keeps a UNIQ_KEY that is already set (MessageClientIDSetter.setUniqID).
        MessageAccessor.putProperty(msg, "UNIQ_KEY", m[7]);
        long ts = System.currentTimeMillis();
        StringBuilder sb = new StringBuilder("{\"ev\":\"send\"");
        PlanSupport.field(sb, "producer", p);
        PlanSupport.field(sb, "uniq_key", m[7]);
        PlanSupport.field(sb, "topic", m[3]);
        PlanSupport.field(sb, "delay_level", level);
        PlanSupport.field(sb, "send_ts", ts);
        try {
            PlanSupport.TransactionAnswers answers = transactions.get(m[7]);
            SendResult r = answers == null ? producer.send(msg)
                    : ((TransactionMQProducer) producer).sendMessageInTransaction(msg, null);
            MessageQueue q = r.getMessageQueue();
            PlanSupport.field(sb, "status", r.getSendStatus().name());
            if (r instanceof TransactionSendResult) {
                LocalTransactionState state = ((TransactionSendResult) r).getLocalTransactionState();
                PlanSupport.field(sb, "local_state", state == null ? null : state.name());
            }
            PlanSupport.field(sb, "msg_id", r.getOffsetMsgId());
            PlanSupport.field(sb, "client_msg_id", r.getMsgId());
            PlanSupport.field(sb, "broker", q.getBrokerName());
            PlanSupport.field(sb, "queue_id", q.getQueueId());
            PlanSupport.field(sb, "queue_offset", r.getQueueOffset());
            if (m.length > 11 && "1".equals(m[11])) {
                try {
                    PlanSupport.field(sb, "recalled_id", recall(producer, m[3], r));
                } catch (Exception e) {
                    PlanSupport.field(sb, "recall_error", String.valueOf(e.getCause() != null ? e.getCause() : e));
                }
            }
        } catch (Exception e) {
            PlanSupport.field(sb, "status", "FAILED");
            PlanSupport.field(sb, "error", e.toString());
        }
        sb.append('}');
        PlanSupport.emit(sb.toString());
    }

    // A producer of transactional messages: its listener returns the plan's answers, to the
    // execution right after the half message is stored and to each check the broker sends.
    static TransactionMQProducer transactionalProducer(String group) {
        TransactionMQProducer producer = traced() ? new TransactionMQProducer(null, group, null, true, null)
                : new TransactionMQProducer(group);
        producer.setTransactionListener(new TransactionListener() {
            @Override
            public LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
                return transactionAnswer(group, "execute", msg.getProperty("UNIQ_KEY"), 0, null);
            }

            @Override
            public LocalTransactionState checkLocalTransaction(MessageExt msg) {
                String uniq = msg.getProperty("UNIQ_KEY");
                int n = checks.computeIfAbsent(uniq, k -> new AtomicInteger()).incrementAndGet();
                return transactionAnswer(group, "check", uniq, n, msg);
            }
        });
        return producer;
    }

    static LocalTransactionState transactionAnswer(String group, String stage, String uniq, int n, MessageExt checked) {
        PlanSupport.TransactionAnswers answers = transactions.get(uniq);
        // A message the plan does not name (none should reach a listener) is left undecided.
        String answer = answers == null ? "UNKNOW" : answers.answer(n);
        StringBuilder sb = new StringBuilder("{\"ev\":\"txn\"");
        PlanSupport.field(sb, "producer_group", group);
        PlanSupport.field(sb, "stage", stage);
        PlanSupport.field(sb, "uniq_key", uniq);
        PlanSupport.field(sb, "n", n);
        PlanSupport.field(sb, "answer", answer);
        PlanSupport.field(sb, "ts", System.currentTimeMillis());
        if (checked != null) {
            // The half copy the broker checks: its commit-log and queue offsets, and its count.
            PlanSupport.field(sb, "topic", checked.getTopic());
            PlanSupport.field(sb, "commit_log_offset", checked.getCommitLogOffset());
            PlanSupport.field(sb, "queue_offset", checked.getQueueOffset());
            PlanSupport.field(sb, "msg_id", checked.getMsgId());
            PlanSupport.field(sb, "check_times", checked.getProperty("TRANSACTION_CHECK_TIMES"));
            PlanSupport.field(sb, "store_ts", checked.getStoreTimestamp());
            PlanSupport.field(sb, "born_ts", checked.getBornTimestamp());
        }
        PlanSupport.emit(sb.append('}').toString());
        return LocalTransactionState.valueOf(answer);
    }

    // producer.recallMessage(topic, sendResult.getRecallHandle()) (5.3.2+ clients; by reflection, so
    // the driver compiles against 4.x): the broker writes a recall record, and the wheel drops both.
    static String recall(DefaultMQProducer producer, String topic, SendResult r) throws Exception {
        Object handle = r.getClass().getMethod("getRecallHandle").invoke(r);
        if (handle == null) throw new IllegalStateException("the broker gave no recall handle for " + r.getMsgId());
        return (String) producer.getClass().getMethod("recallMessage", String.class, String.class)
                .invoke(producer, topic, handle);
    }

    static byte[] body(String head, int size) {
        byte[] h = head.getBytes(StandardCharsets.UTF_8);
        if (h.length >= size) return Arrays.copyOf(h, size);
        byte[] b = new byte[size];
        Arrays.fill(b, (byte) '.');
        System.arraycopy(h, 0, b, 0, h.length);
        return b;
    }

    // A 5.x remoting POP consumer: the client asks the broker for its assignment (which answers
    // POP), pops with the group's invisible time, and on a failure changes the message's invisible
    // time to its popDelayLevel entry for the reconsume times (the last repeats). That table is
    // hard-wired (10 s ... 7200 s); the driver overwrites its entries with the plan's delays, as the
    // model's retry_delays are. By reflection, for the same reason as PlanSupport.servePop.
    static void popClient(DefaultMQPushConsumer c, long invisibleMs, String delays) throws Exception {
        c.getClass().getMethod("setClientRebalance", boolean.class).invoke(c, false);
        c.getClass().getMethod("setPopInvisibleTime", long.class).invoke(c, invisibleMs);
        Object impl = c.getDefaultMQPushConsumerImpl();
        java.lang.reflect.Field field = impl.getClass().getDeclaredField("popDelayLevel");
        field.setAccessible(true);
        int[] table = (int[]) field.get(impl);
        String[] wanted = delays.split(",");
        for (int i = 0; i < table.length; i++) table[i] = Integer.parseInt(wanted[Math.min(i, wanted.length - 1)]);
    }

    static DefaultMQPushConsumer startConsumer(String[] g, int index) throws Exception {
        final String group = g[0];
        final boolean broadcasting = "BROADCASTING".equals(g[1]);
        final boolean orderly = "ORDERLY".equals(g[2]);
        final boolean pop = "POP".equals(g[2]);
        final int max = Integer.parseInt(g[4]);
        final long consumeMs = Long.parseLong(g[5]);
        final String consumerId = group + "-c" + index;
        // With trace on, the constructor every release keeps (5.x dropped (group, enableMsgTrace)).
        DefaultMQPushConsumer c = traced()
                ? new DefaultMQPushConsumer(null, group, null, new AllocateMessageQueueAveragely(), true, null)
                : new DefaultMQPushConsumer(group);
        c.setNamesrvAddr(namesrv);
        c.setInstanceName(consumerId);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.setPollNameServerInterval(1000);
        c.setHeartbeatBrokerInterval(1000);
        c.setConsumeThreadMin(2);
        c.setConsumeThreadMax(2);
        if (broadcasting) c.setMessageModel(MessageModel.BROADCASTING);
        c.setMaxReconsumeTimes(max);
        if (orderly) c.setSuspendCurrentQueueTimeMillis(1000);
        if (pop) popClient(c, Long.parseLong(g[7]), g[8]);
        for (String t : g[6].split(",")) c.subscribe(t, "*");
        if (orderly) {
            c.registerMessageListener((MessageListenerOrderly) (list, ctx) -> {
                String status = "CONSUME_SUCCESS";
                for (MessageExt msg : list) {
                    status = consume(group, consumerId, index, broadcasting, broadcasting ? "BROADCASTING" : "CLUSTERING",
                            msg, ctx.getMessageQueue(), consumeMs);
                }
                return "CONSUME_SUCCESS".equals(status) ? ConsumeOrderlyStatus.SUCCESS
                        : ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT;
            });
        } else {
            c.registerMessageListener((MessageListenerConcurrently) (list, ctx) -> {
                String status = "CONSUME_SUCCESS";
                for (MessageExt msg : list) {
                    status = consume(group, consumerId, index, broadcasting, broadcasting ? "BROADCASTING" : "CLUSTERING",
                            msg, ctx.getMessageQueue(), consumeMs);
                }
                switch (status) {
                    case "CONSUME_SUCCESS": return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
                    case "EXCEPTION": throw new IllegalStateException("conformance: listener throws");
                    case "RETURN_NULL": return null;
                    case PlanSupport.DLQ_REQUESTED:
                        ctx.setDelayLevelWhenNextConsume(PlanSupport.DLQ_DELAY_LEVEL);
                        return ConsumeConcurrentlyStatus.RECONSUME_LATER;
                    default: return ConsumeConcurrentlyStatus.RECONSUME_LATER;
                }
            });
        }
        c.start();
        return c;
    }

    static String consume(String group, String consumerId, int index, boolean broadcasting, String model,
                          MessageExt msg, MessageQueue q, long consumeMs) {
        long start = System.currentTimeMillis();
        Long real = refusedOffsets.get(msg);
        if (real != null) msg.setCommitLogOffset(real);  // consumed again: only the planned attempt is refused
        String uniq = msg.getProperty("UNIQ_KEY");
        String key = broadcasting ? uniq + "/" + index : uniq + "/" + msg.getReconsumeTimes();
        int nth = callsByKey.computeIfAbsent(group + "\t" + key, k -> new AtomicInteger()).getAndIncrement();
        // A call the model never made (a redelivery only the real run had) repeats the model's last
        // verdict for that attempt: a poison message keeps failing.
        String status = verdicts.of(group, key, nth, "CONSUME_SUCCESS");
        boolean refused = !"CONSUME_SUCCESS".equals(status) && refusals.contains(group + "\t" + key + "/" + nth);
        if (consumeMs > 0) {
            try { Thread.sleep(consumeMs); } catch (InterruptedException e) { Thread.currentThread().interrupt(); }
        }
        long end = System.currentTimeMillis();
        StringBuilder sb = new StringBuilder("{\"ev\":\"consume\"");
        PlanSupport.field(sb, "group", group);
        PlanSupport.field(sb, "consumer_id", consumerId);
        PlanSupport.field(sb, "model", model);
        PlanSupport.field(sb, "queue_topic", q.getTopic());
        PlanSupport.field(sb, "broker", q.getBrokerName());
        PlanSupport.field(sb, "queue_id", q.getQueueId());
        PlanSupport.field(sb, "queue_offset", msg.getQueueOffset());
        PlanSupport.field(sb, "msg_id", msg.getMsgId());
        PlanSupport.field(sb, "offset_msg_id", offsetMsgId(msg));
        PlanSupport.field(sb, "uniq_key", uniq);
        PlanSupport.field(sb, "topic", msg.getTopic());
        PlanSupport.field(sb, "reconsume_times", msg.getReconsumeTimes());
        PlanSupport.field(sb, "commit_log_offset", msg.getCommitLogOffset());
        PlanSupport.field(sb, "store_ts", msg.getStoreTimestamp());
        PlanSupport.field(sb, "born_ts", msg.getBornTimestamp());
        PlanSupport.field(sb, "origin_message_id", msg.getProperty("ORIGIN_MESSAGE_ID"));
        PlanSupport.field(sb, "start_ts", start);
        PlanSupport.field(sb, "end_ts", end);
        PlanSupport.field(sb, "status", status);
        PlanSupport.field(sb, "mode", MODES.get(group));
        PlanSupport.field(sb, "send_back_refused", refused ? 1 : 0);
        // A popped message's checkpoint handle (POP_CK, ExtraInfoUtil): its pop and invisible
        // times, and whether it was popped from the topic or from the group's POP retry topic.
        PlanSupport.field(sb, "pop_ck", msg.getProperty("POP_CK"));
        sb.append('}');
        PlanSupport.emit(sb.toString());
        if (refused) refuseSendBack(msg);
        calls.computeIfAbsent(group + "\t" + uniq, k -> new AtomicInteger()).incrementAndGet();
        return status;
    }

    // The listener's MessageExt is the one the consume service sends back after a failure; pointing
    // its commit-log offset past every log makes the broker's send-back fail for real.
    static void refuseSendBack(MessageExt msg) {
        refusedOffsets.putIfAbsent(msg, msg.getCommitLogOffset());
        msg.setCommitLogOffset(REFUSED_OFFSET);
    }

    static String offsetMsgId(MessageExt msg) {
        try {
            java.lang.reflect.Method m = msg.getClass().getMethod("getOffsetMsgId");
            return (String) m.invoke(msg);
        } catch (Exception e) {
            return null;
        }
    }

    static void readPlan(String path) throws Exception {
        PlanSupport.Plan plan = PlanSupport.readPlan(path);
        namesrv = plan.namesrv;
        sideDir = plan.sideDir;
        brokers.putAll(plan.brokers);
        topics.addAll(plan.topics);
        groups.addAll(plan.groups);
        for (String[] g : plan.groups) MODES.put(g[0], g[2]);
        verdicts = plan.verdicts;
        refusals.addAll(plan.refusals);
        msgs.addAll(plan.msgs);
        for (String[] m : plan.msgs) {
            PlanSupport.TransactionAnswers answers = PlanSupport.TransactionAnswers.parse(m.length > 12 ? m[12] : null);
            if (answers == null) continue;
            transactions.put(m[7], answers);
            transactionalProducers.add(Integer.parseInt(m[1]));
        }
        expectCalls.putAll(plan.expectCalls);
        settings.putAll(plan.settings);
        sides.addAll(plan.sides);
    }
}
