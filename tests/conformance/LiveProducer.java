import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;

/** Sends N messages to one topic, one after another, and says how many are sent every 100. */
public class LiveProducer {
    public static void main(String[] args) {
        DriverSupport.exitWith(() -> run(args));
    }

    static int run(String[] args) throws Exception {
        String namesrv = args[0], topic = args[1];
        int count = Integer.parseInt(args[2]);
        DefaultMQProducer producer = DriverSupport.startProducer(namesrv, "live-import-producer");
        StringBuilder pad = new StringBuilder();
        for (int i = 0; i < 400; i++) pad.append('x');
        for (int i = 0; i < count; i++) {
            Message msg = new Message(topic, "live", ("live " + i + " " + pad.substring(0, 100 + i % 300)).getBytes("UTF-8"));
            msg.setKeys("live-" + i);
            if (i % 10 == 0) msg.setDelayTimeLevel(1);
            SendResult result = producer.send(msg);
            if (result.getSendStatus() != SendStatus.SEND_OK) throw new IllegalStateException("send " + i + ": " + result);
            if ((i + 1) % 100 == 0) {
                System.out.println("sent " + (i + 1));
                System.out.flush();
            }
        }
        producer.shutdown();
        System.out.println("done " + count);
        return 0;
    }
}
