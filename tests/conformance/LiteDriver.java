import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import org.apache.rocketmq.client.consumer.AckCallback;
import org.apache.rocketmq.client.consumer.AckResult;
import org.apache.rocketmq.client.consumer.PopCallback;
import org.apache.rocketmq.client.consumer.PopResult;
import org.apache.rocketmq.client.impl.MQClientAPIImpl;
import org.apache.rocketmq.client.impl.factory.MQClientInstance;
import org.apache.rocketmq.common.lite.LiteSubscriptionAction;
import org.apache.rocketmq.common.lite.LiteSubscriptionDTO;
import org.apache.rocketmq.common.lite.OffsetOption;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.remoting.protocol.RemotingCommand;
import org.apache.rocketmq.remoting.protocol.RequestCode;
import org.apache.rocketmq.remoting.protocol.body.LiteSubscriptionCtlRequestBody;
import org.apache.rocketmq.remoting.protocol.header.AckMessageRequestHeader;
import org.apache.rocketmq.remoting.protocol.header.LiteSubscriptionCtlRequestHeader;
import org.apache.rocketmq.remoting.protocol.header.PopLiteMessageRequestHeader;

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
 *                                                        (lite.bind.topic, retryMaxTimes 2); wait for the route
 *   lite  NAMESRV TOPIC LITE COUNT                       COUNT sends to TOPIC with __LITE_TOPIC=LITE
 *   prio  NAMESRV TOPIC COUNT                            COUNT sends with priority (2i + 1) % 3 (setPriority;
 *                                                        not the producer's round-robin queue i % 3)
 *   pop   NAMESRV BROKER BROKER_ADDR TOPIC GROUP LITES NOACK ROUNDS
 *                                                        subscribe GROUP to the comma-separated LITES
 *                                                        (LITE_SUBSCRIPTION_CTL), then ROUNDS pops of
 *                                                        the parent TOPIC (POP_LITE_MESSAGE); every
 *                                                        message is acked (ACK_LITE_MESSAGE) but those
 *                                                        of the lite topic NOACK
 */
public class LiteDriver {
    static final int SEND_TIMEOUT_MS = 10_000;  // a fresh 5.5 broker on a busy machine took more than the default 3 s
    static final int LITE_RETRY_MAX_TIMES = 2;

    public static void main(String[] args) {
        DriverSupport.exitWith(() -> run(args));
    }

    static int run(String[] args) throws Exception {
        switch (args[0]) {
            case "topic": topic(args[1], args[2], args[3], Integer.parseInt(args[4]), args[5], args.length > 6 ? args[6] : null); break;
            case "lite": send(args[1], args[2], args[3], Integer.parseInt(args[4]), false); break;
            case "prio": send(args[1], args[2], null, Integer.parseInt(args[3]), true); break;
            case "pop": pop(args[1], args[2], args[3], args[4], args[5], args[6], args[7], Integer.parseInt(args[8])); break;
            default: throw new IllegalArgumentException(args[0]);
        }
        return 0;
    }

    static void topic(String namesrv, String broker, String topic, int queues, String type, String group) throws Exception {
        DefaultMQAdminExt admin = DriverSupport.startAdmin(namesrv, "lite-admin");
        try {
            TopicConfig config = DriverSupport.topicConfig(topic, queues);
            Map<String, String> attributes = new HashMap<>();
            attributes.put("+message.type", type);
            config.setAttributes(attributes);
            DriverSupport.createTopic(admin, broker, config);
            if (group != null) {
                SubscriptionGroupConfig g = new SubscriptionGroupConfig();
                g.setGroupName(group);
                g.setRetryMaxTimes(LITE_RETRY_MAX_TIMES);
                Map<String, String> ga = new HashMap<>();
                ga.put("+lite.bind.topic", topic);
                g.setAttributes(ga);
                admin.createAndUpdateSubscriptionGroupConfig(broker, g);
            }
        } finally {
            admin.shutdown();
        }
        PlanSupport.emit("{\"ev\":\"topic\",\"topic\":" + PlanSupport.quoted(topic) + ",\"type\":" + PlanSupport.quoted(type) + ",\"group\":" + PlanSupport.quoted(group) + "}");
    }

    static int priorityOf(int i) {
        return (2 * i + 1) % 3;
    }

    static void send(String namesrv, String topic, String lite, int count, boolean priority) throws Exception {
        DefaultMQProducer producer = new DefaultMQProducer("lite-producer");
        producer.setNamesrvAddr(namesrv);
        producer.setInstanceName("lite-producer-" + topic);
        producer.setSendMsgTimeout(SEND_TIMEOUT_MS);
        producer.start();
        try {
            for (int i = 0; i < count; i++) {
                String keys = (priority ? "p-" : "l-") + i;
                Message msg = new Message(topic, "t", keys, (keys + " body").getBytes(StandardCharsets.UTF_8));
                if (priority) {
                    msg.setPriority(priorityOf(i));
                } else {
                    MessageAccessor.putProperty(msg, MessageConst.PROPERTY_LITE_TOPIC, lite);
                }
                StringBuilder sb = new StringBuilder("{\"ev\":\"send\",\"keys\":" + PlanSupport.quoted(keys) + ",\"lite\":" + PlanSupport.quoted(lite)
                    + ",\"priority\":" + (priority ? String.valueOf(priorityOf(i)) : "null"));
                try {
                    SendResult r = producer.send(msg);
                    sb.append(",\"status\":\"").append(r.getSendStatus().name()).append("\",\"uniq_key\":")
                        .append(PlanSupport.quoted(r.getMsgId())).append(",\"queue_id\":").append(r.getMessageQueue().getQueueId())
                        .append(",\"queue_offset\":").append(r.getQueueOffset());
                } catch (Exception e) {
                    sb.append(",\"status\":\"FAILED\",\"error\":").append(PlanSupport.quoted(String.valueOf(e).replace("\n", " ")));
                }
                PlanSupport.emit(sb.append("}").toString());
            }
        } finally {
            producer.shutdown();
        }
    }

    static final long POP_INVISIBLE_MS = 5000;
    static final long POP_POLL_MS = 2000;
    static final long CALL_TIMEOUT_MS = 10_000;

    static void pop(String namesrv, String brokerName, String addr, String topic, String group, String lites,
                    String noAck, int rounds) throws Exception {
        DefaultMQProducer client = new DefaultMQProducer("lite-consumer-client");
        client.setNamesrvAddr(namesrv);
        client.setInstanceName("lite-consumer");
        client.start();
        try {
            MQClientInstance factory = client.getDefaultMQProducerImpl().getMqClientFactory();
            MQClientAPIImpl api = factory.getMQClientAPIImpl();
            String clientId = factory.getClientId();
            LiteSubscriptionDTO dto = new LiteSubscriptionDTO().setAction(LiteSubscriptionAction.PARTIAL_ADD)
                .setClientId(clientId).setGroup(group).setTopic(topic)
                .setLiteTopicSet(new HashSet<>(Arrays.asList(lites.split(",")))).setVersion(1);
            dto.setOffsetOption(new OffsetOption(OffsetOption.Type.POLICY, OffsetOption.POLICY_MIN_VALUE));
            LiteSubscriptionCtlRequestBody body = new LiteSubscriptionCtlRequestBody();
            body.setSubscriptionSet(new HashSet<>(Collections.singletonList(dto)));
            RemotingCommand request = RemotingCommand.createRequestCommand(RequestCode.LITE_SUBSCRIPTION_CTL,
                new LiteSubscriptionCtlRequestHeader());
            request.setBody(body.encode());
            RemotingCommand response = api.getRemotingClient().invokeSync(addr, request, CALL_TIMEOUT_MS);
            PlanSupport.emit("{\"ev\":\"subscribe\",\"code\":" + response.getCode() + ",\"remark\":" + PlanSupport.quoted(response.getRemark()) + "}");
            for (int round = 0; round < rounds; round++) {
                PopLiteMessageRequestHeader header = new PopLiteMessageRequestHeader();
                header.setClientId(clientId);
                header.setConsumerGroup(group);
                header.setTopic(topic);
                header.setMaxMsgNum(16);
                header.setInvisibleTime(POP_INVISIBLE_MS);
                header.setPollTime(POP_POLL_MS);
                header.setBornTime(System.currentTimeMillis());
                header.setAttemptId(UUID.randomUUID().toString());
                CompletableFuture<PopResult> popped = new CompletableFuture<>();
                api.popLiteMessageAsync(brokerName, addr, header, CALL_TIMEOUT_MS, new PopCallback() {
                    @Override public void onSuccess(PopResult r) { popped.complete(r); }
                    @Override public void onException(Throwable e) { popped.completeExceptionally(e); }
                });
                PopResult r;
                try {
                    r = popped.get(CALL_TIMEOUT_MS + POP_POLL_MS, TimeUnit.MILLISECONDS);
                } catch (Exception e) {
                    PlanSupport.emit("{\"ev\":\"pop-failed\",\"round\":" + round + ",\"error\":" + PlanSupport.quoted(String.valueOf(e).replace("\n", " ")) + "}");
                    continue;
                }
                PlanSupport.emit("{\"ev\":\"pop\",\"round\":" + round + ",\"status\":\"" + r.getPopStatus() + "\",\"found\":"
                    + (r.getMsgFoundList() == null ? 0 : r.getMsgFoundList().size()) + "}");
                if (r.getMsgFoundList() == null) continue;
                for (MessageExt m : r.getMsgFoundList()) {
                    String lite = m.getProperty(MessageConst.PROPERTY_LITE_TOPIC);
                    boolean ack = !noAck.equals(lite);
                    PlanSupport.emit("{\"ev\":\"popped\",\"round\":" + round + ",\"keys\":" + PlanSupport.quoted(m.getKeys()) + ",\"uniq_key\":"
                        + PlanSupport.quoted(m.getMsgId()) + ",\"topic\":" + PlanSupport.quoted(m.getTopic()) + ",\"lite\":" + PlanSupport.quoted(lite)
                        + ",\"queue_id\":" + m.getQueueId() + ",\"queue_offset\":" + m.getQueueOffset()
                        + ",\"reconsume_times\":" + m.getReconsumeTimes() + ",\"phys_offset\":" + m.getCommitLogOffset()
                        + ",\"ack\":" + ack + "}");
                    if (ack) {
                        AckMessageRequestHeader h = new AckMessageRequestHeader();
                        h.setConsumerGroup(group);
                        h.setTopic(topic);
                        h.setQueueId(0);  // the lite topic's LMQ queue, whose offset the message carries
                        h.setExtraInfo(m.getProperty(MessageConst.PROPERTY_POP_CK));
                        h.setOffset(m.getQueueOffset());
                        h.setLiteTopic(lite);
                        CompletableFuture<String> acked = new CompletableFuture<>();
                        api.ackLiteMessageAsync(addr, CALL_TIMEOUT_MS, new AckCallback() {
                            @Override public void onSuccess(AckResult a) { acked.complete(String.valueOf(a.getStatus())); }
                            @Override public void onException(Throwable e) { acked.complete("FAILED " + e); }
                        }, h);
                        PlanSupport.emit("{\"ev\":\"ack\",\"keys\":" + PlanSupport.quoted(m.getKeys()) + ",\"lite\":" + PlanSupport.quoted(lite) + ",\"result\":"
                            + PlanSupport.quoted(acked.get(CALL_TIMEOUT_MS, TimeUnit.MILLISECONDS).replace("\n", " ")) + "}");
                    }
                }
            }
        } finally {
            client.shutdown();
        }
    }
}
