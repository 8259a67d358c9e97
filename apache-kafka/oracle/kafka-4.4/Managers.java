/*
 * The oracle's access to the broker's quota managers as Kafka 4.4 on has them: the Java
 * classes in org.apache.kafka.server.quota, called with Optional and
 * org.apache.kafka.network.Request.
 */

import com.fasterxml.jackson.databind.JsonNode;

import java.lang.reflect.Field;
import java.net.InetAddress;
import java.nio.ByteBuffer;
import java.util.Optional;
import java.util.function.LongConsumer;

import org.apache.kafka.common.memory.MemoryPool;
import org.apache.kafka.common.metrics.Metrics;
import org.apache.kafka.common.metrics.Quota;
import org.apache.kafka.common.metrics.QuotaViolationException;
import org.apache.kafka.common.metrics.Sensor;
import org.apache.kafka.common.network.ClientInformation;
import org.apache.kafka.common.network.ListenerName;
import org.apache.kafka.common.protocol.ApiKeys;
import org.apache.kafka.common.requests.ApiVersionsRequest;
import org.apache.kafka.common.requests.RequestContext;
import org.apache.kafka.common.requests.RequestHeader;
import org.apache.kafka.common.security.auth.KafkaPrincipal;
import org.apache.kafka.common.security.auth.SecurityProtocol;
import org.apache.kafka.common.utils.Time;
import org.apache.kafka.common.utils.internals.Sanitizer;
import org.apache.kafka.network.Request;
import org.apache.kafka.network.Session;
import org.apache.kafka.server.config.ClientQuotaManagerConfig;
import org.apache.kafka.server.quota.AbstractControllerMutationQuota;
import org.apache.kafka.server.quota.ClientQuotaEntity;
import org.apache.kafka.server.quota.ClientQuotaManager;
import org.apache.kafka.server.quota.ClientRequestQuotaManager;
import org.apache.kafka.server.quota.ControllerMutationQuota;
import org.apache.kafka.server.quota.ControllerMutationQuotaManager;
import org.apache.kafka.server.quota.PermissiveControllerMutationQuota;
import org.apache.kafka.server.quota.QuotaType;
import org.apache.kafka.server.quota.QuotaUtils;
import org.apache.kafka.server.quota.StrictControllerMutationQuota;
import org.apache.kafka.server.quota.ThrottleCallback;

final class Managers implements KafkaQuotas {
    private static final InetAddress CLIENT_ADDRESS = InetAddress.getLoopbackAddress();

    @Override
    public Manager byteRate(String type, int samples, int windowSeconds, Metrics metrics, Time time) {
        QuotaType quotaType = type.equals("produce") ? QuotaType.PRODUCE : QuotaType.FETCH;
        return new Base(new ClientQuotaManager(new ClientQuotaManagerConfig(samples, windowSeconds), metrics,
            quotaType, time, "oracle-"), quotaType);
    }

    @Override
    public RequestManager requestTime(int samples, int windowSeconds, Metrics metrics, Time time) {
        return new Requests(new ClientRequestQuotaManager(new ClientQuotaManagerConfig(samples, windowSeconds),
            metrics, time, "oracle-", Optional.empty()));
    }

    @Override
    public MutationManager mutations(int samples, int windowSeconds, Metrics metrics, Time time) {
        return new Mutations(new ControllerMutationQuotaManager(new ClientQuotaManagerConfig(samples,
            windowSeconds), metrics, time, "oracle-", Optional.empty()));
    }

    @Override
    public Mutation bucketQuota(Time time, Sensor sensor, boolean strict) {
        return mutation(strict ? new StrictControllerMutationQuota(time, sensor)
            : new PermissiveControllerMutationQuota(time, sensor));
    }

    @Override
    public long throttleTime(QuotaViolationException e, long nowMs) {
        return QuotaUtils.throttleTime(e, nowMs);
    }

    static Session session(String user) {
        return new Session(new KafkaPrincipal(KafkaPrincipal.USER_TYPE, user), CLIENT_ADDRESS);
    }

    /** A request as the socket server hands it to the API layer (an ApiVersions request;
     * the quota managers read only its principal and client id, and its thread time). */
    static Request request(String user, String clientId, long threadTimeNanos) {
        ApiVersionsRequest body = new ApiVersionsRequest.Builder().build();
        ByteBuffer buffer = body.serializeWithHeader(
            new RequestHeader(ApiKeys.API_VERSIONS, body.version(), clientId, 1));
        RequestHeader header = RequestHeader.parse(buffer);
        RequestContext context = new RequestContext(header, "connection-1", CLIENT_ADDRESS,
            new KafkaPrincipal(KafkaPrincipal.USER_TYPE, user),
            ListenerName.forSecurityProtocol(SecurityProtocol.PLAINTEXT), SecurityProtocol.PLAINTEXT,
            ClientInformation.EMPTY, false);
        Request request = new Request(1, context, 0L, MemoryPool.NONE, buffer, null);
        request.requestDequeueTimeNanos(0L);
        request.apiLocalCompleteTimeNanos(threadTimeNanos);
        return request;
    }

    static Optional<ClientQuotaEntity.ConfigEntity> userEntity(JsonNode spec) {
        if (spec == null || spec.isNull()) return Optional.empty();
        String text = spec.asText();
        if (text.equals("D")) return Optional.of(ClientQuotaManager.DEFAULT_USER_ENTITY);
        // As the broker's ClientQuotaMetadataManager: user entities are sanitized names.
        return Optional.of(new ClientQuotaManager.UserEntity(Sanitizer.sanitize(text.substring(2))));
    }

    static Optional<ClientQuotaEntity.ConfigEntity> clientEntity(JsonNode spec) {
        if (spec == null || spec.isNull()) return Optional.empty();
        String text = spec.asText();
        if (text.equals("D")) return Optional.of(ClientQuotaManager.DEFAULT_USER_CLIENT_ID);
        return Optional.of(new ClientQuotaManager.ClientIdEntity(text.substring(2)));
    }

    static ThrottleCallback callback(Runnable onEnd) {
        return new ThrottleCallback() {
            @Override
            public void startThrottling() { }

            @Override
            public void endThrottling() {
                onEnd.run();
            }
        };
    }

    static Mutation mutation(ControllerMutationQuota quota) {
        return new Mutation() {
            @Override
            public void record(double permits) {
                quota.record(permits);
            }

            @Override
            public boolean isExceeded() {
                return quota.isExceeded();
            }

            @Override
            public int throttleTime() {
                return quota.throttleTime();
            }

            @Override
            public Long lastThrottleTimeMs() throws ReflectiveOperationException {
                if (!(quota instanceof AbstractControllerMutationQuota)) return null;
                // A protected field without an accessor in this generation.
                Field field = AbstractControllerMutationQuota.class.getDeclaredField("lastThrottleTimeMs");
                field.setAccessible(true);
                return field.getLong(quota);
            }
        };
    }

    private static class Base implements Manager {
        final ClientQuotaManager manager;
        private final QuotaType type;

        Base(ClientQuotaManager manager, QuotaType type) {
            this.manager = manager;
            this.type = type;
        }

        @Override
        public Object kafka() {
            return manager;
        }

        @Override
        public String group() {
            return type.toString();
        }

        @Override
        public void updateQuota(JsonNode user, JsonNode client, Double quota) {
            manager.updateQuota(userEntity(user), clientEntity(client),
                quota == null ? Optional.empty() : Optional.of(new Quota(quota, true)));
        }

        @Override
        public int record(String user, String client, double value, long nowMs) {
            return manager.maybeRecordAndGetThrottleTimeMs(session(user), client, value, nowMs);
        }

        @Override
        public void unrecord(String user, String client, double value, long nowMs) {
            manager.unrecordQuotaSensor(session(user), client, value, nowMs);
        }

        @Override
        public void recordNoThrottle(String user, String client, double value) {
            manager.recordNoThrottle(session(user), client, value);
        }

        @Override
        public void throttle(String user, String client, Runnable onEnd, int throttleMs) {
            manager.throttle(client, session(user), callback(onEnd), throttleMs);
        }

        @Override
        public double maxValueInQuotaWindow(String user, String client) {
            return manager.maxValueInQuotaWindow(session(user), client);
        }

        @Override
        public double quota(String user, String client) {
            return manager.quota(user, client).bound();
        }

        @Override
        public boolean quotasEnabled() {
            return manager.quotasEnabled();
        }
    }

    private static final class Requests extends Base implements RequestManager {
        private final ClientRequestQuotaManager requests;

        Requests(ClientRequestQuotaManager manager) {
            super(manager, QuotaType.REQUEST);
            requests = manager;
        }

        /** The request's network-thread callback field: a no-op until a manager installs
         * one (set by the manager, read by the socket server; no getter). */
        private static LongConsumer callbackOf(Request request) throws ReflectiveOperationException {
            Field field = Request.class.getDeclaredField("recordNetworkThreadTimeCallback");
            field.setAccessible(true);
            return (LongConsumer) field.get(request);
        }

        private static Handled handled(Request request, int throttleMs, LongConsumer before) {
            return new Handled() {
                @Override
                public int throttleMs() {
                    return throttleMs;
                }

                @Override
                public LongConsumer networkCallback() throws ReflectiveOperationException {
                    LongConsumer now = callbackOf(request);
                    return now == before ? null : now;
                }
            };
        }

        @Override
        public Handled recordRequest(String user, String client, long threadNanos, long nowMs) {
            Request request = request(user, client, threadNanos);
            try {
                LongConsumer before = callbackOf(request);
                return handled(request, requests.maybeRecordAndGetThrottleTimeMs(request, nowMs), before);
            } catch (ReflectiveOperationException e) {
                throw new IllegalStateException(e);
            }
        }

        @Override
        public Handled recordExempt(String user, String client, long threadNanos) {
            Request request = request(user, client, threadNanos);
            try {
                LongConsumer before = callbackOf(request);
                requests.maybeRecordExempt(request);
                return handled(request, 0, before);
            } catch (ReflectiveOperationException e) {
                throw new IllegalStateException(e);
            }
        }

        @Override
        public double nanosToPercentage(long nanos) throws ReflectiveOperationException {
            var method = ClientRequestQuotaManager.class.getDeclaredMethod("nanosToPercentage", long.class);
            method.setAccessible(true);
            return (Double) method.invoke(requests, nanos);
        }
    }

    private static final class Mutations extends Base implements MutationManager {
        private final ControllerMutationQuotaManager mutations;

        Mutations(ControllerMutationQuotaManager manager) {
            super(manager, QuotaType.CONTROLLER_MUTATION);
            mutations = manager;
        }

        @Override
        public Mutation newQuota(String user, String client, boolean strict) {
            return mutation(strict ? mutations.newStrictQuotaFor(session(user), client)
                : mutations.newPermissiveQuotaFor(session(user), client));
        }
    }
}
