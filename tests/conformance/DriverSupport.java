import java.util.Arrays;
import java.util.concurrent.Callable;

import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * What the real-broker tests' drivers share: running a driver to a JVM exit code, the admin
 * client that creates their topics (a POP group's too) and waits for the name server to route
 * them, their producer, and their plans of failure counts. Compiled with each driver (tests/conformance/java_driver.py), against 4.9.4's jars and
 * 5.x's alike, so it names only what both have (TopicConfig's attributes and MessageRequestMode
 * are 5.x's: a 5.x driver sets attributes on the TopicConfig it hands createTopic). The drivers
 * print their JSON lines with PlanSupport.emit and PlanSupport.quoted, as the product's drivers do.
 */
public final class DriverSupport {
    static final long ROUTE_WAIT_MS = 30_000;  // a limit: a broker that never registers fails the run
    static final long ROUTE_POLL_MS = 200;
    static final int PERM_READ_WRITE = 6;  // PermName.PERM_READ | PermName.PERM_WRITE
    static final int SEND_RETRIES = 5;  // a send the broker refused at once (busy at start) is tried again

    private DriverSupport() {
    }

    /** Runs the driver and ends the JVM with its exit code, 1 when it threw: the clients' threads
     * are not daemons, so the JVM would not end by itself. */
    static void exitWith(Callable<Integer> driver) {
        int code = 1;
        try {
            code = driver.call();
        } catch (Throwable e) {
            e.printStackTrace();
        }
        System.exit(code);
    }

    /** A started admin client of the name server. */
    static DefaultMQAdminExt startAdmin(String namesrv, String instanceName) throws Exception {
        DefaultMQAdminExt admin = new DefaultMQAdminExt();
        admin.setNamesrvAddr(namesrv);
        admin.setInstanceName(instanceName);
        admin.start();
        return admin;
    }

    /** A readable and writable topic with that many read and write queues. */
    static TopicConfig topicConfig(String topic, int queues) {
        return new TopicConfig(topic, queues, queues, PERM_READ_WRITE);
    }

    /** Creates (or updates) the topic on the broker and waits for its route. */
    static void createTopic(DefaultMQAdminExt admin, String brokerAddr, TopicConfig config) throws Exception {
        admin.createAndUpdateTopicConfig(brokerAddr, config);
        waitForRoute(admin, config.getTopicName());
    }

    /** Creates the topic with that many queues on the broker and waits for its route, with an admin
     * client of its own. */
    static void createTopic(String namesrv, String brokerAddr, String topic, int queues) throws Exception {
        DefaultMQAdminExt admin = startAdmin(namesrv, topic + "-admin");
        try {
            createTopic(admin, brokerAddr, topicConfig(topic, queues));
        } finally {
            admin.shutdown();
        }
    }

    /** Creates the topic with that many queues on the broker, waits for its route, and has the
     * broker serve the group on it by POP (PlanSupport.servePop; 5.x brokers). */
    static void createPopTopic(String namesrv, String brokerAddr, String topic, int queues, String group)
            throws Exception {
        DefaultMQAdminExt admin = startAdmin(namesrv, group + "-admin");
        try {
            createTopic(admin, brokerAddr, topicConfig(topic, queues));
            PlanSupport.servePop(admin, brokerAddr, topic, group);
        } finally {
            admin.shutdown();
        }
    }

    /** A started producer of that group (retrying a failed send SEND_RETRIES times). */
    static DefaultMQProducer startProducer(String namesrv, String producerGroup) throws Exception {
        DefaultMQProducer producer = new DefaultMQProducer(producerGroup);
        producer.setNamesrvAddr(namesrv);
        producer.setRetryTimesWhenSendFailed(SEND_RETRIES);
        producer.start();
        return producer;
    }

    /** A plan of failure counts, one per message ("2,0,5"): message i fails its first plan[i]
     * deliveries (what a count beyond the retries or a negative one means is the driver's). */
    static int[] failureCounts(String plan) {
        return Arrays.stream(plan.split(",")).mapToInt(Integer::parseInt).toArray();
    }

    /** Waits until the name server routes the topic (it learns a route from the broker's next
     * registration, not from the topic's creation); fails after ROUTE_WAIT_MS. */
    static void waitForRoute(DefaultMQAdminExt admin, String topic) throws Exception {
        long deadline = System.currentTimeMillis() + ROUTE_WAIT_MS;
        while (true) {
            try {
                if (!admin.examineTopicRouteInfo(topic).getQueueDatas().isEmpty()) return;
            } catch (Exception e) {
                if (System.currentTimeMillis() > deadline) throw e;
            }
            if (System.currentTimeMillis() > deadline) {
                throw new IllegalStateException("the name server routes topic " + topic + " to no queue after "
                        + ROUTE_WAIT_MS + " ms");
            }
            Thread.sleep(ROUTE_POLL_MS);
        }
    }
}
