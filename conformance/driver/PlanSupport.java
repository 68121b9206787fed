import java.io.BufferedReader;
import java.io.FileReader;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * What the two plan drivers (Driver.java for the remoting clients, GrpcPlanDriver.java for the gRPC
 * ones) share: the plan, read once, with the model's listener verdicts; and what every driver
 * shares, the real-broker tests' too: printing a JSON line and its values (the one emit and the one
 * JSON quoting; tests/broker_core/test_tidy.py keeps it so), and having the broker serve a group by
 * POP. Compiled with each (conformance/driver.py, tests/conformance/java_driver.py), against 4.9.4's
 * jars and 5.x's alike.
 */
final class PlanSupport {
    /** When the last JSON line was printed: a driver ends once nothing happened for a while. */
    static final AtomicLong LAST_EMIT_MS = new AtomicLong(System.currentTimeMillis());

    private PlanSupport() {
    }

    /** Prints one JSON line, whole and flushed, whichever client thread calls. */
    static void emit(String line) {
        synchronized (System.out) {
            System.out.println(line);
            System.out.flush();
        }
        LAST_EMIT_MS.set(System.currentTimeMillis());
    }

    /** A plan file's lines by kind (Driver.java documents them); a line's fields after its kind. */
    static final class Plan {
        String namesrv;
        String sideDir;
        final Map<String, String> brokers = new LinkedHashMap<>();
        final List<String[]> topics = new ArrayList<>();
        final List<String[]> groups = new ArrayList<>();
        final Verdicts verdicts = new Verdicts();
        final Set<String> refusals = new HashSet<>();
        final List<String[]> msgs = new ArrayList<>();
        final Map<String, Integer> expectCalls = new HashMap<>();
        final Map<String, Long> settings = new HashMap<>();
        final Set<String> sides = new HashSet<>();
    }

    /** Reads a plan (tab-separated, written by conformance/plan.py); a line of an unknown kind is
     * an error. */
    static Plan readPlan(String path) throws IOException {
        Plan plan = new Plan();
        try (BufferedReader r = new BufferedReader(new FileReader(path, StandardCharsets.UTF_8))) {
            String line;
            while ((line = r.readLine()) != null) {
                if (line.isEmpty() || line.startsWith("#")) continue;
                String[] f = line.split("\t", -1);
                String[] rest = Arrays.copyOfRange(f, 1, f.length);
                switch (f[0]) {
                    case "namesrv": plan.namesrv = f[1]; break;
                    case "broker": plan.brokers.put(f[1], f[2]); break;
                    case "topic": plan.topics.add(rest); break;
                    case "group": plan.groups.add(rest); break;
                    case "verdict": plan.verdicts.add(f[1], f[2], f[3]); break;
                    case "refuse": plan.refusals.add(f[1] + "\t" + f[2]); break;
                    case "msg": plan.msgs.add(rest); break;
                    case "expect": plan.expectCalls.put(f[1] + "\t" + f[2], Integer.parseInt(f[3])); break;
                    case "setting": plan.settings.put(f[1], Long.parseLong(f[2])); break;
                    case "side": plan.sides.add(f[1] + "\t" + f[2]); break;
                    case "sidedir": plan.sideDir = f[1]; break;
                    default: throw new IllegalArgumentException("plan line of unknown kind: " + line);
                }
            }
        }
        return plan;
    }

    /** The model's verdict for a concurrent listener that asks for the DLQ: it sets
     * {@code ConsumeConcurrentlyContext.setDelayLevelWhenNextConsume(DLQ_DELAY_LEVEL)} and returns
     * RECONSUME_LATER, so the send-back carries delay level -1 and the broker stores the message
     * in %DLQ%group at once. */
    static final String DLQ_REQUESTED = "DLQ_REQUESTED";
    static final int DLQ_DELAY_LEVEL = -1;

    /**
     * The model's listener verdicts, from the plan's {@code verdict GROUP KEY/N VERDICT} lines: the
     * verdict of the N-th call of KEY in GROUP (N from 0). A call past the model's last one (the
     * real client may deliver more often) gets the verdict of the highest N.
     */
    static final class Verdicts {
        private final Map<String, String> byCall = new HashMap<>();
        private final Map<String, String> last = new HashMap<>();
        private final Map<String, Integer> lastN = new HashMap<>();

        void add(String group, String keyAndN, String verdict) {
            byCall.put(group + "\t" + keyAndN, verdict);
            int slash = keyAndN.lastIndexOf('/');
            String base = group + "\t" + keyAndN.substring(0, slash);
            int n = Integer.parseInt(keyAndN.substring(slash + 1));
            if (n >= lastN.getOrDefault(base, -1)) {
                lastN.put(base, n);
                last.put(base, verdict);
            }
        }

        /** The verdict of the {@code nth} call of {@code key} in {@code group}; {@code otherwise}
         * when the model never called its listener with it. */
        String of(String group, String key, int nth, String otherwise) {
            return byCall.getOrDefault(group + "\t" + key + "/" + nth,
                    last.getOrDefault(group + "\t" + key, otherwise));
        }
    }

    /** A transactional message's local-transaction answers, from the plan's TRANSACTION field: a
     * comma list of LocalTransactionState names, the first what executeLocalTransaction returns,
     * the n-th after it what the n-th checkLocalTransaction returns; the last repeats. So
     * {@code COMMIT_MESSAGE} commits at once, {@code UNKNOW,UNKNOW,ROLLBACK_MESSAGE} rolls back
     * at the second check, {@code UNKNOW} never decides; {@code -} is no transaction. The one
     * parser of that field. */
    static final class TransactionAnswers {
        static final String NONE = "-";
        static final Set<String> STATES = new HashSet<>(Arrays.asList("COMMIT_MESSAGE", "ROLLBACK_MESSAGE", "UNKNOW"));
        private final String[] answers;

        private TransactionAnswers(String[] answers) {
            this.answers = answers;
        }

        /** The answers a plan field names; null for {@code -} (a plain send). */
        static TransactionAnswers parse(String field) {
            if (field == null || NONE.equals(field)) return null;
            String[] answers = field.split(",");
            for (String a : answers) {
                if (!STATES.contains(a)) throw new IllegalArgumentException("transaction answer: " + a + " in " + field);
            }
            return new TransactionAnswers(answers);
        }

        /** The answer to the local execution (n = 0) or to the n-th check (n >= 1). */
        String answer(int n) {
            return answers[Math.min(n, answers.length - 1)];
        }
    }

    /** Appends {@code ,"name":value} to a JSON line: null, a number, or an escaped string. */
    static void field(StringBuilder sb, String name, Object value) {
        sb.append(",\"").append(name).append("\":");
        if (value instanceof Number) {
            sb.append(value);
        } else {
            sb.append(quoted(value == null ? null : value.toString()));
        }
    }

    /** {@code s} as a JSON string (quote, backslash and control characters escaped), or null. */
    static String quoted(String s) {
        if (s == null) return "null";
        StringBuilder sb = new StringBuilder(s.length() + 2).append('"');
        for (char ch : s.toCharArray()) {
            if (ch == '"' || ch == '\\') sb.append('\\').append(ch);
            else if (ch < 0x20) sb.append(String.format("\\u%04x", (int) ch));
            else sb.append(ch);
        }
        return sb.append('"').toString();
    }

    /** The broker serves the group by POP on the topic (messageRequestMode.json), every consumer of
     * the group popping every queue (popShareQueueNum -1). By reflection: 4.x has no POP, and the
     * drivers compile against every release. */
    static void servePop(DefaultMQAdminExt admin, String brokerAddr, String topic, String group) throws Exception {
        Class<?> mode = Class.forName("org.apache.rocketmq.common.message.MessageRequestMode");
        Object pop = mode.getField("POP").get(null);
        admin.getClass().getMethod("setMessageRequestMode", String.class, String.class, String.class, mode,
                int.class, long.class).invoke(admin, brokerAddr, topic, group, pop, -1, 5000L);
    }
}
