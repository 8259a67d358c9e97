/*
 * What differs between Kafka releases in the oracle: where the broker's quota managers
 * live and how they are called. QuotaOracle.java feeds Kafka's managers through this
 * interface; one implementation per generation of the managers' API, each in a folder
 * named for the first Kafka release it compiles against (kafka-3.9/, kafka-4.0/,
 * kafka-4.4/), is compiled beside it. Every answer still comes from Kafka's own classes:
 * an implementation only constructs them and calls them.
 */

import com.fasterxml.jackson.databind.JsonNode;

import java.util.function.LongConsumer;

import org.apache.kafka.common.metrics.Metrics;
import org.apache.kafka.common.metrics.QuotaViolationException;
import org.apache.kafka.common.metrics.Sensor;
import org.apache.kafka.common.utils.Time;

interface KafkaQuotas {
    /** The produce ("produce") or fetch ("fetch") byte-rate manager. */
    Manager byteRate(String type, int samples, int windowSeconds, Metrics metrics, Time time);

    /** The request-time manager (KIP-124). */
    RequestManager requestTime(int samples, int windowSeconds, Metrics metrics, Time time);

    /** The controller mutation manager (KIP-599). */
    MutationManager mutations(int samples, int windowSeconds, Metrics metrics, Time time);

    /** Kafka's strict or permissive mutation quota over one bare token-bucket sensor. */
    Mutation bucketQuota(Time time, Sensor sensor, boolean strict);

    /** Kafka's throttle time for a violation of a sampled rate (QuotaUtils.throttleTime). */
    long throttleTime(QuotaViolationException e, long nowMs);

    /** One of the broker's client-quota managers. Entities in quota updates are "N:name",
     * "D" (the default) or null (absent), as in the oracle's protocol. */
    interface Manager {
        /** Kafka's manager itself, whose private delay queue, reaper and callback the
         * oracle reads (the field names are the same in every generation). */
        Object kafka();

        /** The manager's metric group (its QuotaType's name). */
        String group();

        void updateQuota(JsonNode user, JsonNode client, Double quota);

        int record(String user, String client, double value, long nowMs);

        void unrecord(String user, String client, double value, long nowMs);

        void recordNoThrottle(String user, String client, double value);

        void throttle(String user, String client, Runnable onEnd, int throttleMs);

        double maxValueInQuotaWindow(String user, String client);

        double quota(String user, String client);

        boolean quotasEnabled();
    }

    /** A request as the request-time manager left it. */
    interface Handled {
        int throttleMs();

        /** What the socket server calls with the network thread's time once the response
         * is sent, if the manager installed it; otherwise null. */
        LongConsumer networkCallback() throws ReflectiveOperationException;
    }

    interface RequestManager extends Manager {
        /** A request whose handler took threadNanos, recorded (and maybe throttled). */
        Handled recordRequest(String user, String client, long threadNanos, long nowMs);

        /** The same for a request exempt from throttling (from the inter-broker listener). */
        Handled recordExempt(String user, String client, long threadNanos);

        /** The manager's own conversion of nanoseconds to a percentage of a thread. */
        double nanosToPercentage(long nanos) throws ReflectiveOperationException;
    }

    interface MutationManager extends Manager {
        Mutation newQuota(String user, String client, boolean strict);
    }

    /** One request's controller mutation quota. */
    interface Mutation {
        /** Throws ThrottlingQuotaExceededException where Kafka refuses the mutations. */
        void record(double permits);

        boolean isExceeded();

        int throttleTime();

        /** The throttle as the last record computed it (a long), or null where the quota
         * does not keep one. */
        Long lastThrottleTimeMs() throws ReflectiveOperationException;
    }
}
