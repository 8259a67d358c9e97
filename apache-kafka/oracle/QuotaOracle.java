/*
 * Apache Kafka's own quota classes as an oracle for kquota's tests.
 *
 * Compiled by tests/support/kafka_oracle.py against the jars `make tools` copies into
 * ${XDG_CACHE_HOME:-~/.cache}/kquota/kafka-<version>/libs (the version pinned in
 * kafka/pom.xml), and run as one JVM per test session. It uses Kafka's classes as a
 * library: every quota decision below is made by Kafka's code (ClientQuotaManager,
 * ClientRequestQuotaManager, ControllerMutationQuotaManager, ConnectionQuotas, Sensor,
 * Rate, TokenBucket); this file only feeds them operations on a clock the test sets and
 * reports what they answer.
 *
 * Protocol: one JSON object per line on stdin, {"traces": [trace, ...]}; one JSON line
 * on stdout per input line, {"results": [[answer, ...], ...]}, one answer per operation.
 * A trace starts from nothing (new Metrics, new managers) and is
 *   {"family": "client" | "mutation" | "connection" | "sensor" | "bucket",
 *    "config": {...}, "ops": [{"op": name, "t": ms, ...}, ...]}.
 * Doubles travel as their IEEE bits in a long (Double.doubleToRawLongBits) both ways, so
 * that nothing is lost to decimal text. An operation that throws answers {"err": text}.
 * Entities are "N:<name>" (a name), "D" (the <default> entity) or null (absent).
 */

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.io.PrintWriter;
import java.lang.reflect.Field;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.net.InetAddress;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.DelayQueue;
import java.util.concurrent.TimeUnit;
import java.util.function.LongConsumer;
import java.util.function.Supplier;

import kafka.network.ConnectionQuotas;
import kafka.server.KafkaConfig;

import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.errors.ThrottlingQuotaExceededException;
import org.apache.kafka.common.metrics.KafkaMetric;
import org.apache.kafka.common.metrics.MetricConfig;
import org.apache.kafka.common.metrics.Metrics;
import org.apache.kafka.common.metrics.Quota;
import org.apache.kafka.common.metrics.QuotaViolationException;
import org.apache.kafka.common.metrics.Sensor;
import org.apache.kafka.common.metrics.stats.Rate;
import org.apache.kafka.common.metrics.stats.TokenBucket;
import org.apache.kafka.common.network.ListenerName;
import org.apache.kafka.common.security.auth.KafkaPrincipal;
import org.apache.kafka.common.utils.Time;
import org.apache.kafka.network.ConnectionThrottledException;
import org.apache.kafka.server.quota.ClientQuotaCallback;
import org.apache.kafka.server.quota.ClientQuotaType;
import org.apache.kafka.server.util.ShutdownableThread;

public final class QuotaOracle {
    private static final ObjectMapper JSON = new ObjectMapper();
    /** Kafka's quota managers, as the Kafka on the classpath has them. */
    private static final KafkaQuotas KAFKA = new Managers();

    private QuotaOracle() { }

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        PrintWriter out = new PrintWriter(new OutputStreamWriter(System.out, StandardCharsets.UTF_8), false);
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) continue;
            JsonNode batch = JSON.readTree(line);
            ObjectNode reply = JSON.createObjectNode();
            ArrayNode results = reply.putArray("results");
            for (JsonNode trace : batch.get("traces")) {
                results.add(runTrace(trace));
            }
            out.println(JSON.writeValueAsString(reply));
            out.flush();
        }
    }

    private static ArrayNode runTrace(JsonNode trace) throws Exception {
        ManualTime time = new ManualTime(trace.path("start").asLong(0));
        Family family;
        String name = trace.get("family").asText();
        JsonNode config = trace.get("config");
        switch (name) {
            case "client": family = new ClientFamily(time, config); break;
            case "mutation": family = new MutationFamily(time, config); break;
            case "connection": family = new ConnectionFamily(time, config); break;
            case "sensor": family = new SensorFamily(time, config); break;
            case "bucket": family = new BucketFamily(time, config); break;
            default: throw new IllegalArgumentException("unknown family " + name);
        }
        ArrayNode answers = JSON.createArrayNode();
        try {
            for (JsonNode op : trace.get("ops")) {
                time.set(op.get("t").asLong());
                ObjectNode answer = JSON.createObjectNode();
                try {
                    family.apply(op, answer);
                } catch (Exception e) {
                    Throwable cause = e instanceof InvocationTargetException ? e.getCause() : e;
                    answer.removeAll();
                    answer.put("err", cause.getClass().getName() + ": " + cause.getMessage());
                }
                answers.add(answer);
            }
        } finally {
            family.close();
        }
        return answers;
    }

    // -- the clock ------------------------------------------------------------------------

    /** A clock that moves only when the trace says so (each operation sets it). */
    static final class ManualTime implements Time {
        private volatile long nowMs;

        ManualTime(long nowMs) {
            this.nowMs = nowMs;
        }

        void set(long ms) {
            nowMs = ms;
        }

        @Override
        public long milliseconds() {
            return nowMs;
        }

        @Override
        public long nanoseconds() {
            return TimeUnit.MILLISECONDS.toNanos(nowMs);
        }

        @Override
        public void sleep(long ms) {
            nowMs += ms;
        }

        @Override
        public void waitObject(Object obj, Supplier<Boolean> condition, long deadlineMs) {
            // Nothing in the oracle waits: a wait would be a harness bug, so say so.
            throw new IllegalStateException("the oracle's clock does not wait");
        }
    }

    // -- helpers ----------------------------------------------------------------------------

    interface Family {
        void apply(JsonNode op, ObjectNode answer) throws Exception;

        void close() throws Exception;
    }

    static double dbl(JsonNode bits) {
        return Double.longBitsToDouble(bits.asLong());
    }

    static void putDouble(ObjectNode answer, String field, Double value) {
        if (value == null) answer.putNull(field);
        else answer.put(field, Double.doubleToRawLongBits(value));
    }

    static Long bits(Double value) {
        return value == null ? null : Double.doubleToRawLongBits(value);
    }

    static Double metricValue(Metrics metrics, MetricName name) {
        KafkaMetric metric = metrics.metric(name);
        return metric == null ? null : (Double) metric.metricValue();
    }

    static Double metricBound(Metrics metrics, MetricName name) {
        KafkaMetric metric = metrics.metric(name);
        if (metric == null || metric.config() == null || metric.config().quota() == null) return null;
        return metric.config().quota().bound();
    }

    @SuppressWarnings("unchecked")
    static Map<String, Sensor> sensorMap(Metrics metrics) throws ReflectiveOperationException {
        // The registry's own map: the names Kafka holds, to list and to diff around expiry.
        Field field = Metrics.class.getDeclaredField("sensors");
        field.setAccessible(true);
        return (Map<String, Sensor>) field.get(metrics);
    }

    static TreeSet<String> sensorNames(Metrics metrics) throws ReflectiveOperationException {
        return new TreeSet<>(sensorMap(metrics).keySet());
    }

    /** Kafka's broker-side expiry task (Metrics.ExpireSensorTask), run once now. */
    static List<String> expireSensors(Metrics metrics) throws ReflectiveOperationException {
        TreeSet<String> before = sensorNames(metrics);
        Class<?> task = Class.forName("org.apache.kafka.common.metrics.Metrics$ExpireSensorTask");
        var constructor = task.getDeclaredConstructor(Metrics.class);
        constructor.setAccessible(true);
        ((Runnable) constructor.newInstance(metrics)).run();
        before.removeAll(sensorNames(metrics));
        return new ArrayList<>(before);
    }

    static ArrayNode strings(Iterable<String> values) {
        ArrayNode array = JSON.createArrayNode();
        for (String value : values) array.add(value);
        return array;
    }

    static Metrics newMetrics(Time time) {
        // The broker's metric defaults (2 samples of 30 s), no reporters, and no expiry
        // thread: the trace runs the expiry task itself, at the times it chooses.
        return new Metrics(new MetricConfig(), Collections.emptyList(), time, false);
    }

    /** Reads a field Kafka keeps private, on the object's class or a superclass. The
     * highest class that declares it wins: a subclass may keep a constructor argument of
     * the same name (the mutation manager's Option of the callback, in Scala). */
    static Object privateField(Object owner, String name) throws ReflectiveOperationException {
        List<Class<?>> chain = new ArrayList<>();
        for (Class<?> c = owner.getClass(); c != null; c = c.getSuperclass()) chain.add(0, c);
        for (Class<?> c : chain) {
            try {
                Field field = c.getDeclaredField(name);
                field.setAccessible(true);
                return field.get(owner);
            } catch (NoSuchFieldException e) {
                // declared lower down
            }
        }
        throw new NoSuchFieldException(owner.getClass().getName() + "." + name);
    }

    static Double quotaOf(JsonNode op, boolean remove) {
        return remove ? null : dbl(op.get("q"));
    }

    /** A manager's delay queue, its reaper stopped: the trace drains it with the reaper's
     * own doWork, once per entry whose delay has run out, so what is drained depends on
     * the clock only. */
    static final class Reaper {
        private final ShutdownableThread thread;
        private final DelayQueue<? extends java.util.concurrent.Delayed> queue;

        @SuppressWarnings("unchecked")
        Reaper(KafkaQuotas.Manager manager) throws Exception {
            thread = (ShutdownableThread) privateField(manager.kafka(), "throttledChannelReaper");
            // Stop the background thread before anything is queued: it is waiting in the
            // queue's poll (or has not started), takes nothing and exits.
            thread.initiateShutdown();
            thread.interrupt();
            thread.awaitShutdown();
            thread.join();
            queue = (DelayQueue<? extends java.util.concurrent.Delayed>) privateField(manager.kafka(), "delayQueue");
        }

        void drain() {
            while (true) {
                var head = queue.peek();
                if (head == null || head.getDelay(TimeUnit.NANOSECONDS) > 0) return;
                thread.doWork();
            }
        }
    }

    // -- produce, fetch and request quotas --------------------------------------------------

    /** The broker's produce, fetch and request managers over one Metrics registry. */
    static final class ClientFamily implements Family {
        private final Metrics metrics;
        private final Map<String, KafkaQuotas.Manager> managers = new HashMap<>();
        private final Map<String, Reaper> reapers = new HashMap<>();
        private final Map<String, List<Long>> ended = new HashMap<>();
        private final Map<Long, KafkaQuotas.Handled> requests = new HashMap<>();
        private final KafkaQuotas.RequestManager request;

        ClientFamily(Time time, JsonNode config) throws Exception {
            metrics = newMetrics(time);
            int samples = config.get("samples").asInt();
            int windowSeconds = config.get("window_s").asInt();
            managers.put("produce", KAFKA.byteRate("produce", samples, windowSeconds, metrics, time));
            managers.put("fetch", KAFKA.byteRate("fetch", samples, windowSeconds, metrics, time));
            request = KAFKA.requestTime(samples, windowSeconds, metrics, time);
            managers.put("request", request);
            for (Map.Entry<String, KafkaQuotas.Manager> entry : managers.entrySet()) {
                reapers.put(entry.getKey(), new Reaper(entry.getValue()));
                ended.put(entry.getKey(), new ArrayList<>());
            }
        }

        private MetricName quotaMetric(String type, Map<String, String> tags) {
            String name = type.equals("request") ? "request-time" : "byte-rate";
            return metrics.metricName(name, managers.get(type).group(), "", tags);
        }

        @Override
        public void apply(JsonNode op, ObjectNode answer) throws Exception {
            String type = op.path("m").asText("produce");
            KafkaQuotas.Manager manager = managers.get(type);
            String user = op.path("u").asText();
            String client = op.path("c").asText();
            List<Long> done = ended.get(type);
            switch (op.get("op").asText()) {
                case "set":
                    manager.updateQuota(op.get("eu"), op.get("ec"), quotaOf(op, false));
                    break;
                case "remove":
                    manager.updateQuota(op.get("eu"), op.get("ec"), quotaOf(op, true));
                    break;
                case "record": {
                    long t = op.get("t").asLong();
                    int throttle;
                    if (type.equals("request")) {
                        KafkaQuotas.Handled handled = request.recordRequest(user, client, op.get("ns").asLong(), t);
                        throttle = handled.throttleMs();
                        requests.put(op.get("rid").asLong(), handled);
                    } else {
                        throttle = manager.record(user, client, dbl(op.get("v")), t);
                    }
                    answer.put("th", throttle);
                    // The broker's handling of a throttled request: the bytes of a fetch
                    // answered empty are taken back, and the channel is muted.
                    if (throttle > 0 && op.path("unrec").asBoolean(false))
                        manager.unrecord(user, client, dbl(op.get("v")), t);
                    if (throttle > 0 && op.has("ch")) {
                        long channel = op.get("ch").asLong();
                        manager.throttle(user, client, () -> done.add(channel), throttle);
                    }
                    break;
                }
                case "exempt":
                    requests.put(op.get("rid").asLong(), request.recordExempt(user, client, op.get("ns").asLong()));
                    break;
                case "network": {
                    // What the socket server does once the response is sent: the network
                    // thread's time goes to the callback the manager installed, if any.
                    LongConsumer hook = requests.remove(op.get("rid").asLong()).networkCallback();
                    answer.put("cb", hook != null);
                    if (hook != null) hook.accept(op.get("ns").asLong());
                    break;
                }
                case "unrecord":
                    manager.unrecord(user, client, dbl(op.get("v")), op.get("t").asLong());
                    break;
                case "nothrottle": {
                    // Request: network-thread nanoseconds, converted by the manager's own
                    // nanosToPercentage (what its network-thread callback records).
                    double value = type.equals("request")
                        ? request.nanosToPercentage(op.get("ns").asLong())
                        : dbl(op.get("v"));
                    manager.recordNoThrottle(user, client, value);
                    break;
                }
                case "throttle": {
                    long channel = op.get("ch").asLong();
                    manager.throttle(user, client, () -> done.add(channel), op.get("ms").asInt());
                    break;
                }
                case "drain": {
                    done.clear();
                    reapers.get(type).drain();
                    ArrayNode channels = answer.putArray("ch");
                    done.stream().sorted().forEach(channels::add);
                    done.clear();
                    break;
                }
                case "read":
                    read(type, manager, op, answer);
                    break;
                case "qsize":
                    answer.put("n", (Double) metrics.metric(
                        metrics.metricName("queue-size", manager.group(), "", Collections.emptyMap())).metricValue());
                    break;
                case "maxval":
                    putDouble(answer, "v", manager.maxValueInQuotaWindow(user, client));
                    break;
                case "expire":
                    answer.set("removed", strings(expireSensors(metrics)));
                    break;
                case "sensors": {
                    TreeSet<String> names = sensorNames(metrics);
                    names.removeIf(n -> n.endsWith("-delayQueue") || n.startsWith("exempt-"));
                    answer.set("names", strings(names));
                    break;
                }
                case "exempt_rate":
                    putDouble(answer, "rate", metricValue(metrics,
                        metrics.metricName("exempt-request-time", request.group(), "", Collections.emptyMap())));
                    break;
                case "snapshot":
                    snapshot(type, answer);
                    break;
                case "enabled":
                    answer.put("on", manager.quotasEnabled());
                    break;
                default:
                    throw new IllegalArgumentException("unknown op " + op.get("op"));
            }
        }

        /** The client's tags, quota, sensor bound, rate and throttle-time average, in that
         * order (reading a rate or an average purges, as a JMX read does); "fields" picks
         * some of them. */
        private void read(String type, KafkaQuotas.Manager manager, JsonNode op, ObjectNode answer)
                throws ReflectiveOperationException {
            String user = op.path("u").asText();
            String client = op.path("c").asText();
            Set<String> fields = new HashSet<>(List.of("tags", "quota", "bound", "rate", "tavg"));
            if (op.has("fields")) {
                fields.clear();
                op.get("fields").forEach(f -> fields.add(f.asText()));
            }
            Map<String, String> tags = quotaTags(manager, type, user, client);
            if (fields.contains("tags"))
                answer.set("tags", strings(List.of(tags.get("user"), tags.get("client-id"))));
            if (fields.contains("quota"))
                putDouble(answer, "quota", manager.quota(user, client));
            if (fields.contains("bound"))
                putDouble(answer, "bound", metricBound(metrics, quotaMetric(type, tags)));
            if (fields.contains("rate"))
                putDouble(answer, "rate", metricValue(metrics, quotaMetric(type, tags)));
            if (fields.contains("tavg"))
                putDouble(answer, "tavg", metricValue(metrics, metrics.metricName("throttle-time", manager.group(), "", tags)));
        }

        private void snapshot(String type, ObjectNode answer) {
            MetricName probe = quotaMetric(type, Collections.emptyMap());
            List<ArrayNode> rows = new ArrayList<>();
            for (Map.Entry<MetricName, KafkaMetric> entry : metrics.metrics().entrySet()) {
                MetricName name = entry.getKey();
                if (!name.name().equals(probe.name()) || !name.group().equals(probe.group())) continue;
                ArrayNode row = JSON.createArrayNode();
                row.add(name.tags().get("user"));
                row.add(name.tags().get("client-id"));
                row.add(bits((Double) entry.getValue().metricValue()));
                row.add(bits(entry.getValue().config().quota().bound()));
                Long avg = bits(metricValue(metrics, metrics.metricName("throttle-time", managers.get(type).group(), "", name.tags())));
                if (avg == null) row.addNull(); else row.add(avg);
                rows.add(row);
            }
            rows.sort((a, b) -> {
                int byUser = a.get(0).asText().compareTo(b.get(0).asText());
                return byUser != 0 ? byUser : a.get(1).asText().compareTo(b.get(1).asText());
            });
            ArrayNode out = answer.putArray("rows");
            rows.forEach(out::add);
        }

        @Override
        public void close() {
            metrics.close();
        }
    }

    /** The tags the manager's callback gives a client now (without creating its sensors). */
    @SuppressWarnings("unchecked")
    static Map<String, String> quotaTags(KafkaQuotas.Manager manager, String type, String user, String client)
            throws ReflectiveOperationException {
        ClientQuotaCallback callback = (ClientQuotaCallback) privateField(manager.kafka(), "quotaCallback");
        ClientQuotaType quotaType = switch (type) {
            case "produce" -> ClientQuotaType.PRODUCE;
            case "fetch" -> ClientQuotaType.FETCH;
            case "request" -> ClientQuotaType.REQUEST;
            default -> ClientQuotaType.CONTROLLER_MUTATION;
        };
        return callback.quotaMetricTags(quotaType, new KafkaPrincipal(KafkaPrincipal.USER_TYPE, user), client);
    }

    // -- controller mutations (KIP-599) -----------------------------------------------------

    static final class MutationFamily implements Family {
        private final Metrics metrics;
        private final KafkaQuotas.MutationManager manager;
        private final Reaper reaper;
        private final List<Long> ended = new ArrayList<>();
        private final Map<Long, KafkaQuotas.Mutation> requests = new HashMap<>();
        private final String group;

        MutationFamily(Time time, JsonNode config) throws Exception {
            metrics = newMetrics(time);
            manager = KAFKA.mutations(config.get("samples").asInt(), config.get("window_s").asInt(), metrics, time);
            reaper = new Reaper(manager);
            group = manager.group();
        }

        @Override
        public void apply(JsonNode op, ObjectNode answer) throws Exception {
            String user = op.path("u").asText();
            String client = op.path("c").asText();
            switch (op.get("op").asText()) {
                case "set":
                    manager.updateQuota(op.get("eu"), op.get("ec"), quotaOf(op, false));
                    break;
                case "remove":
                    manager.updateQuota(op.get("eu"), op.get("ec"), quotaOf(op, true));
                    break;
                case "record":
                    answer.put("th", manager.record(user, client, dbl(op.get("v")), op.get("t").asLong()));
                    break;
                case "strict":
                case "permissive":
                    recordOn(manager.newQuota(user, client, op.get("op").asText().equals("strict")),
                        dbl(op.get("v")), answer);
                    break;
                case "rq_open": {
                    KafkaQuotas.Mutation quota = manager.newQuota(user, client, op.get("strict").asBoolean());
                    requests.put(op.get("rid").asLong(), quota);
                    answer.put("exc", quota.isExceeded());
                    break;
                }
                case "rq_record":
                    recordOn(requests.get(op.get("rid").asLong()), dbl(op.get("v")), answer);
                    break;
                case "rq_throttle":
                    answer.put("th", requests.get(op.get("rid").asLong()).throttleTime());
                    break;
                case "throttle": {
                    long channel = op.get("ch").asLong();
                    manager.throttle(user, client, () -> ended.add(channel), op.get("ms").asInt());
                    break;
                }
                case "drain": {
                    ended.clear();
                    reaper.drain();
                    ArrayNode channels = answer.putArray("ch");
                    ended.stream().sorted().forEach(channels::add);
                    ended.clear();
                    break;
                }
                case "read": {
                    Map<String, String> tags = quotaTags(manager, "controller_mutation", user, client);
                    answer.set("tags", strings(List.of(tags.get("user"), tags.get("client-id"))));
                    putDouble(answer, "quota", manager.quota(user, client));
                    MetricName tokens = metrics.metricName("tokens", group, "", tags);
                    putDouble(answer, "bound", metricBound(metrics, tokens));
                    putDouble(answer, "tokens", metricValue(metrics, tokens));
                    putDouble(answer, "mrate", metricValue(metrics, metrics.metricName("mutation-rate", group, "", tags)));
                    putDouble(answer, "tavg", metricValue(metrics, metrics.metricName("throttle-time", group, "", tags)));
                    break;
                }
                case "qsize":
                    answer.put("n", (Double) metrics.metric(
                        metrics.metricName("queue-size", group, "", Collections.emptyMap())).metricValue());
                    break;
                case "expire":
                    answer.set("removed", strings(expireSensors(metrics)));
                    break;
                case "sensors": {
                    TreeSet<String> names = sensorNames(metrics);
                    names.removeIf(n -> n.endsWith("-delayQueue"));
                    answer.set("names", strings(names));
                    break;
                }
                case "enabled":
                    answer.put("on", manager.quotasEnabled());
                    break;
                default:
                    throw new IllegalArgumentException("unknown op " + op.get("op"));
            }
        }

        private void recordOn(KafkaQuotas.Mutation quota, double permits, ObjectNode answer)
                throws ReflectiveOperationException {
            boolean accepted = true;
            try {
                quota.record(permits);
            } catch (ThrottlingQuotaExceededException e) {
                accepted = false;
                answer.put("eth", e.throttleTimeMs());
            }
            answer.put("ok", accepted);
            answer.put("exc", quota.isExceeded());
            answer.put("th", quota.throttleTime());
            // The throttle as the record computed it (a long; the int above is what a
            // response carries).
            Long last = quota.lastThrottleTimeMs();
            if (last != null) answer.put("last", last);
        }

        @Override
        public void close() {
            metrics.close();
        }
    }

    // -- connection creation rates (KIP-612) ------------------------------------------------

    static final class ConnectionFamily implements Family {
        private final ManualTime time;
        private final Metrics metrics;
        private final KafkaConfig config;
        private final ConnectionQuotas quotas;
        private final Method acceptDelay;
        private final Method admitIp;

        ConnectionFamily(ManualTime time, JsonNode spec) throws Exception {
            this.time = time;
            Properties props = new Properties();
            // A broker-only KRaft node: enough for KafkaConfig to validate.
            props.put("process.roles", "broker");
            props.put("node.id", "1");
            props.put("controller.listener.names", "CONTROLLER");
            props.put("controller.quorum.bootstrap.servers", "localhost:9099");
            String interBroker = spec.path("ibl").isNull() || spec.path("ibl").isMissingNode()
                ? "PLAINTEXT" : spec.get("ibl").asText();
            props.put("listeners", interBroker + "://localhost:9092");
            props.put("listener.security.protocol.map", "CONTROLLER:PLAINTEXT," + interBroker + ":PLAINTEXT");
            props.put("inter.broker.listener.name", interBroker);
            props.put("quota.window.num", spec.get("samples").asText());
            props.put("quota.window.size.seconds", spec.get("window_s").asText());
            if (!spec.path("broker_rate").isNull() && !spec.path("broker_rate").isMissingNode())
                props.put("max.connection.creation.rate", spec.get("broker_rate").asText());
            config = KafkaConfig.fromProps(props, false);
            metrics = newMetrics(time);
            quotas = new ConnectionQuotas(config, time, metrics);
            // The two halves of ConnectionQuotas.inc that decide rates: inc itself waits on
            // a monitor in real time for the accept delay, which a test clock cannot end.
            acceptDelay = ConnectionQuotas.class.getDeclaredMethod("recordConnectionAndGetThrottleTimeMs",
                ListenerName.class, long.class);
            acceptDelay.setAccessible(true);
            admitIp = ConnectionQuotas.class.getDeclaredMethod("recordIpConnectionMaybeThrottle",
                ListenerName.class, InetAddress.class);
            admitIp.setAccessible(true);
            for (JsonNode listener : spec.get("listeners")) {
                addListener(listener.get(0).asText(), listener.get(1));
            }
        }

        private void addListener(String name, JsonNode rate) {
            ListenerName listener = new ListenerName(name);
            quotas.addListener(config, listener);
            setListenerRate(name, rate);
        }

        private void setListenerRate(String name, JsonNode rate) {
            // A dynamic listener config update (listener.name.<l>.max.connection.creation.rate).
            Map<String, Object> configs = new HashMap<>();
            if (rate != null && !rate.isNull()) configs.put("max.connection.creation.rate", rate.asInt());
            quotas.maxConnectionsPerListener().get(new ListenerName(name)).get().reconfigure(configs);
        }

        private long accept(String listener) throws Exception {
            long delay = (Long) acceptDelay.invoke(quotas, new ListenerName(listener), time.milliseconds());
            // waitForConnectionSlot waits max(delay, 0).
            return Math.max(delay, 0);
        }

        private long admit(String listener, String ip) throws Exception {
            try {
                admitIp.invoke(quotas, new ListenerName(listener), InetAddress.getByName(ip));
                return 0;
            } catch (InvocationTargetException e) {
                if (e.getCause() instanceof ConnectionThrottledException)
                    return ((ConnectionThrottledException) e.getCause()).throttleTimeMs;
                throw e;
            }
        }

        private MetricName rateMetric(String name, Map<String, String> tags) {
            return metrics.metricName(name, "socket-server-metrics", "", tags);
        }

        @Override
        public void apply(JsonNode op, ObjectNode answer) throws Exception {
            switch (op.get("op").asText()) {
                case "set_ip": {
                    JsonNode ip = op.get("ip");
                    JsonNode rate = op.get("rate");
                    quotas.updateIpConnectionRateQuota(
                        ip.isNull() ? scala.Option.empty() : scala.Option.apply(InetAddress.getByName(ip.asText())),
                        rate.isNull() ? scala.Option.empty() : scala.Option.apply((Object) rate.asInt()));
                    break;
                }
                case "set_broker":
                    quotas.updateBrokerMaxConnectionRate(op.get("rate").asInt());
                    break;
                case "add_listener":
                    addListener(op.get("l").asText(), op.get("rate"));
                    break;
                case "set_listener":
                    setListenerRate(op.get("l").asText(), op.get("rate"));
                    break;
                case "remove_listener":
                    quotas.removeListener(config, new ListenerName(op.get("l").asText()));
                    break;
                case "accept":
                    answer.put("d", accept(op.get("l").asText()));
                    break;
                case "admit":
                    answer.put("th", admit(op.get("l").asText(), op.get("ip").asText()));
                    break;
                case "connect": {
                    // inc: the acceptor's delay, then (once the delay has passed) the IP check.
                    long delay = accept(op.get("l").asText());
                    time.set(time.milliseconds() + delay);
                    answer.put("d", delay);
                    answer.put("th", admit(op.get("l").asText(), op.get("ip").asText()));
                    break;
                }
                case "read": {
                    putDouble(answer, "broker", metricValue(metrics,
                        rateMetric("broker-connection-accept-rate", Collections.emptyMap())));
                    ObjectNode listeners = answer.putObject("listeners");
                    for (JsonNode l : op.get("ls")) {
                        Map<String, String> tags = Map.of("listener", l.asText());
                        ArrayNode row = listeners.putArray(l.asText());
                        row.add(bits(metricValue(metrics, rateMetric("connection-accept-rate", tags))));
                        row.add(bits(metricValue(metrics, rateMetric("connection-accept-throttle-time", tags))));
                        row.add(bits(metricValue(metrics, rateMetric("ip-connection-accept-throttle-time", tags))));
                    }
                    ObjectNode ips = answer.putObject("ips");
                    for (JsonNode ip : op.get("ips")) {
                        InetAddress address = InetAddress.getByName(ip.asText());
                        Map<String, String> tags = Map.of("ip", address.getHostAddress());
                        ArrayNode row = ips.putArray(ip.asText());
                        Long rate = bits(metricValue(metrics, rateMetric("connection-accept-rate", tags)));
                        if (rate == null) row.addNull(); else row.add(rate);
                        Long bound = bits(metricBound(metrics, rateMetric("connection-accept-rate", tags)));
                        if (bound == null) row.addNull(); else row.add(bound);
                        row.add(quotas.connectionRateForIp(address));
                    }
                    break;
                }
                case "expire":
                    answer.set("removed", strings(expireSensors(metrics)));
                    break;
                case "sensors": {
                    TreeSet<String> names = sensorNames(metrics);
                    names.removeIf(n -> !n.startsWith("Connection-Accept-Rate-")
                        || quotas.maxConnectionsPerListener().contains(new ListenerName(
                            n.substring("Connection-Accept-Rate-".length()))));
                    answer.set("names", strings(names));
                    break;
                }
                default:
                    throw new IllegalArgumentException("unknown op " + op.get("op"));
            }
        }

        @Override
        public void close() {
            quotas.close();
            metrics.close();
        }
    }

    // -- one bare sensor: a Rate, or a TokenBucket ------------------------------------------

    static MetricConfig sensorConfig(JsonNode config, JsonNode quotaBits) {
        MetricConfig metricConfig = new MetricConfig()
            .samples(config.get("samples").asInt())
            .timeWindow(config.get("window_ms").asLong(), TimeUnit.MILLISECONDS);
        if (quotaBits != null && !quotaBits.isNull()) metricConfig.quota(new Quota(dbl(quotaBits), true));
        return metricConfig;
    }

    static final class SensorFamily implements Family {
        private final JsonNode config;
        private final Metrics metrics;
        private final Sensor sensor;
        private final KafkaMetric metric;

        SensorFamily(Time time, JsonNode config) {
            this.config = config;
            metrics = newMetrics(time);
            sensor = metrics.sensor("rate", sensorConfig(config, config.get("q")));
            MetricName name = metrics.metricName("rate", "oracle");
            sensor.add(name, new Rate());
            metric = metrics.metric(name);
        }

        @Override
        public void apply(JsonNode op, ObjectNode answer) {
            long t = op.get("t").asLong();
            switch (op.get("op").asText()) {
                case "rec":
                    try {
                        sensor.record(dbl(op.get("v")), t, true);
                        answer.put("viol", false);
                        answer.put("th", 0L);
                        boolean bounded = metric.config().quota() != null;
                        putDouble(answer, "rate", bounded ? (Double) metric.metricValue() : null);
                    } catch (QuotaViolationException e) {
                        answer.put("viol", true);
                        answer.put("th", KAFKA.throttleTime(e, t));
                        putDouble(answer, "rate", e.value());
                    }
                    break;
                case "rec_nc":
                    sensor.record(dbl(op.get("v")), t, false);
                    break;
                case "measure":
                    putDouble(answer, "rate", (Double) metric.metricValue());
                    break;
                case "setq":
                    metric.config(sensorConfig(config, op.get("q")));
                    break;
                default:
                    throw new IllegalArgumentException("unknown op " + op.get("op"));
            }
        }

        @Override
        public void close() {
            metrics.close();
        }
    }

    static final class BucketFamily implements Family {
        private final Time time;
        private final JsonNode config;
        private final Metrics metrics;
        private final Sensor sensor;
        private final KafkaMetric metric;

        BucketFamily(Time time, JsonNode config) {
            this.time = time;
            this.config = config;
            metrics = newMetrics(time);
            sensor = metrics.sensor("bucket");
            MetricName name = metrics.metricName("tokens", "oracle");
            sensor.add(name, new TokenBucket(), sensorConfig(config, config.get("q")));
            metric = metrics.metric(name);
        }

        @Override
        public void apply(JsonNode op, ObjectNode answer) throws ReflectiveOperationException {
            switch (op.get("op").asText()) {
                case "rec":
                    sensor.record(dbl(op.get("v")), op.get("t").asLong(), false);
                    break;
                case "measure":
                    putDouble(answer, "tokens", (Double) metric.metricValue());
                    break;
                case "strict":
                case "permissive": {
                    KafkaQuotas.Mutation quota = KAFKA.bucketQuota(time, sensor, op.get("op").asText().equals("strict"));
                    boolean accepted = true;
                    try {
                        quota.record(dbl(op.get("v")));
                    } catch (ThrottlingQuotaExceededException e) {
                        accepted = false;
                    }
                    answer.put("ok", accepted);
                    // The throttle the record computed (throttleTime() would subtract the
                    // time since then, from time 0 for a quota that never throttled).
                    answer.put("th", quota.lastThrottleTimeMs());
                    break;
                }
                case "setq":
                    metric.config(sensorConfig(config, op.get("q")));
                    break;
                default:
                    throw new IllegalArgumentException("unknown op " + op.get("op"));
            }
        }

        @Override
        public void close() {
            metrics.close();
        }
    }
}
