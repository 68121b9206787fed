import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Map;

import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageAccessor;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.remoting.protocol.subscription.SubscriptionGroupConfig;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * Lite topics (5.5) and priority messages (5.4) sent to a real 5.5.1 broker with its 5.5.0
 * remoting client (tests/conformance/make_lite_store.py); one JSON line per step on stdout.
 *
 *   topic NAMESRV BROKER_ADDR TOPIC QUEUES TYPE [GROUP]  create TOPIC with message.type TYPE (LITE,
 *                                                        PRIORITY); for LITE also GROUP bound to it
 *                                                        (lite.bind.topic); wait for the route
 *   lite  NAMESRV TOPIC LITE COUNT                       COUNT sends to TOPIC with __LITE_TOPIC=LITE
 *   prio  NAMESRV TOPIC COUNT                            COUNT sends with priority i % 3 (setPriority)
 */
public class LiteDriver {
    public static void main(String[] args) throws Exception {
        int code = 0;
        try {
            switch (args[0]) {
                case "topic": topic(args[1], args[2], args[3], Integer.parseInt(args[4]), args[5], args.length > 6 ? args[6] : null); break;
                case "lite": send(args[1], args[2], args[3], Integer.parseInt(args[4]), false); break;
                case "prio": send(args[1], args[2], null, Integer.parseInt(args[3]), true); break;
                default: throw new IllegalArgumentException(args[0]);
            }
        } catch (Throwable e) {
            e.printStackTrace();
            code = 1;
        }
        System.exit(code);
    }

    static void emit(String line) {
        synchronized (System.out) {
            System.out.println(line);
            System.out.flush();
        }
    }

    static String quoted(String s) {
        return s == null ? "null" : "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
    }

    static void topic(String namesrv, String broker, String topic, int queues, String type, String group) throws Exception {
        DefaultMQAdminExt admin = new DefaultMQAdminExt();
        admin.setNamesrvAddr(namesrv);
        admin.setInstanceName("lite-admin");
        admin.start();
        try {
            TopicConfig config = new TopicConfig(topic, queues, queues, 6);
            Map<String, String> attributes = new HashMap<>();
            attributes.put("+message.type", type);
            config.setAttributes(attributes);
            admin.createAndUpdateTopicConfig(broker, config);
            if (group != null) {
                SubscriptionGroupConfig g = new SubscriptionGroupConfig();
                g.setGroupName(group);
                Map<String, String> ga = new HashMap<>();
                ga.put("+lite.bind.topic", topic);
                g.setAttributes(ga);
                admin.createAndUpdateSubscriptionGroupConfig(broker, g);
            }
            long deadline = System.currentTimeMillis() + 30_000;
            while (true) {
                try {
                    if (!admin.examineTopicRouteInfo(topic).getQueueDatas().isEmpty()) break;
                } catch (Exception e) {
                    if (System.currentTimeMillis() > deadline) throw e;
                }
                Thread.sleep(200);
            }
        } finally {
            admin.shutdown();
        }
        emit("{\"ev\":\"topic\",\"topic\":" + quoted(topic) + ",\"type\":" + quoted(type) + ",\"group\":" + quoted(group) + "}");
    }

    static void send(String namesrv, String topic, String lite, int count, boolean priority) throws Exception {
        DefaultMQProducer producer = new DefaultMQProducer("lite-producer");
        producer.setNamesrvAddr(namesrv);
        producer.setInstanceName("lite-producer-" + topic);
        producer.start();
        try {
            for (int i = 0; i < count; i++) {
                String keys = (priority ? "p-" : "l-") + i;
                Message msg = new Message(topic, "t", keys, (keys + " body").getBytes(StandardCharsets.UTF_8));
                if (priority) {
                    msg.setPriority(i % 3);
                } else {
                    MessageAccessor.putProperty(msg, MessageConst.PROPERTY_LITE_TOPIC, lite);
                }
                StringBuilder sb = new StringBuilder("{\"ev\":\"send\",\"keys\":" + quoted(keys) + ",\"lite\":" + quoted(lite)
                    + ",\"priority\":" + (priority ? String.valueOf(i % 3) : "null"));
                try {
                    SendResult r = producer.send(msg);
                    sb.append(",\"status\":\"").append(r.getSendStatus().name()).append("\",\"uniq_key\":")
                        .append(quoted(r.getMsgId())).append(",\"queue_id\":").append(r.getMessageQueue().getQueueId())
                        .append(",\"queue_offset\":").append(r.getQueueOffset());
                } catch (Exception e) {
                    sb.append(",\"status\":\"FAILED\",\"error\":").append(quoted(String.valueOf(e).replace("\n", " ")));
                }
                emit(sb.append("}").toString());
            }
        } finally {
            producer.shutdown();
        }
    }
}
