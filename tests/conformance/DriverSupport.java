import java.util.concurrent.Callable;

import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.message.MessageRequestMode;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * What the real-broker tests' 5.x drivers share: running a driver to a JVM exit code, and the
 * admin client that creates their topics (a POP group's too) and waits for the name server to
 * route them. Compiled with each driver (tests/conformance/java_driver.py); they print their JSON
 * lines with PlanSupport.emit, as the product's drivers do.
 */
public final class DriverSupport {
    static final long ROUTE_WAIT_MS = 30_000;  // a limit: a broker that never registers fails the run
    static final long ROUTE_POLL_MS = 200;

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

    /** Creates the topic with that many queues on the broker, waits for its route, and has the
     * broker serve the group on it by POP (messageRequestMode.json; popShareQueueNum -1: every
     * consumer of the group pops from every queue). */
    static void createPopTopic(String namesrv, String brokerAddr, String topic, int queues, String group)
            throws Exception {
        DefaultMQAdminExt admin = startAdmin(namesrv, group + "-admin");
        try {
            admin.createAndUpdateTopicConfig(brokerAddr, new TopicConfig(topic, queues, queues, 6));
            waitForRoute(admin, topic);
            admin.setMessageRequestMode(brokerAddr, topic, group, MessageRequestMode.POP, -1, 5000);
        } finally {
            admin.shutdown();
        }
    }

    /** Waits until the name server routes the topic: it learns a route from the broker's next
     * registration, not from the topic's creation. */
    static void waitForRoute(DefaultMQAdminExt admin, String topic) throws Exception {
        long deadline = System.currentTimeMillis() + ROUTE_WAIT_MS;
        while (true) {
            try {
                if (!admin.examineTopicRouteInfo(topic).getQueueDatas().isEmpty()) return;
            } catch (Exception e) {
                if (System.currentTimeMillis() > deadline) throw e;
            }
            Thread.sleep(ROUTE_POLL_MS);
        }
    }
}
