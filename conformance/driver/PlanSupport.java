import java.util.HashMap;
import java.util.Map;

/**
 * What the two plan drivers (Driver.java for the remoting clients, GrpcPlanDriver.java for the gRPC
 * ones) share: the model's listener verdicts read from the plan, and the fields of the JSON lines
 * they print (which the real-broker tests' drivers print too). Compiled with each
 * (conformance/driver.py, tests/conformance/java_driver.py).
 */
final class PlanSupport {
    private PlanSupport() {
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

    /** Appends {@code ,"name":value} to a JSON line: null, a number, or an escaped string. */
    static void field(StringBuilder sb, String name, Object value) {
        sb.append(",\"").append(name).append("\":");
        if (value == null) {
            sb.append("null");
        } else if (value instanceof Number) {
            sb.append(value);
        } else {
            sb.append('"');
            for (char ch : value.toString().toCharArray()) {
                if (ch == '"' || ch == '\\') sb.append('\\').append(ch);
                else if (ch < 0x20) sb.append(String.format("\\u%04x", (int) ch));
                else sb.append(ch);
            }
            sb.append('"');
        }
    }
}
