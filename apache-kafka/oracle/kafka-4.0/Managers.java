/*
 * The oracle's access to the broker's quota managers as Kafka 4.0 and 4.1 have them: the
 * Scala classes in kafka.server, called with scala.Option and RequestChannel.Request. From
 * 4.2 the controller mutation quotas are Java classes, which this adapter does not reach.
 */

import com.fasterxml.jackson.databind.JsonNode;

import java.net.InetAddress;
import java.nio.ByteBuffer;
import java.util.Optional;
import java.util.function.Consumer;
import java.util.function.LongConsumer;

import kafka.network.RequestChannel;
import kafka.server.AbstractControllerMutationQuota;
import kafka.server.ClientQuotaManager;
import kafka.server.ClientRequestQuotaManager;
import kafka.server.ControllerMutationQuota;
import kafka.server.ControllerMutationQuotaManager;
import kafka.server.PermissiveControllerMutationQuota;
import kafka.server.StrictControllerMutationQuota;

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
import org.apache.kafka.common.utils.Sanitizer;
import org.apache.kafka.common.utils.Time;
import org.apache.kafka.network.Session;
import org.apache.kafka.server.config.ClientQuotaManagerConfig;
import org.apache.kafka.server.quota.ClientQuotaEntity;
import org.apache.kafka.server.quota.QuotaType;
import org.apache.kafka.server.quota.QuotaUtils;
import org.apache.kafka.server.quota.ThrottleCallback;

final class Managers implements KafkaQuotas {
    private static final InetAddress CLIENT_ADDRESS = InetAddress.getLoopbackAddress();

    @Override
    public Manager byteRate(String type, int samples, int windowSeconds, Metrics metrics, Time time) {
        QuotaType quotaType = type.equals("produce") ? QuotaType.PRODUCE : QuotaType.FETCH;
        return new Base(new ClientQuotaManager(new ClientQuotaManagerConfig(samples, windowSeconds), metrics,
            quotaType, time, "oracle-", scala.Option.empty()), quotaType);
    }

    @Override
    public RequestManager requestTime(int samples, int windowSeconds, Metrics metrics, Time time) {
        return new Requests(new ClientRequestQuotaManager(new ClientQuotaManagerConfig(samples, windowSeconds),
            metrics, time, "oracle-", Optional.empty()));
    }

    @Override
    public MutationManager mutations(int samples, int windowSeconds, Metrics metrics, Time time) {
        return new Mutations(new ControllerMutationQuotaManager(new ClientQuotaManagerConfig(samples,
            windowSeconds), metrics, time, "oracle-", scala.Option.empty()));
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
    static RequestChannel.Request request(String user, String clientId, long threadTimeNanos) {
        ApiVersionsRequest body = new ApiVersionsRequest.Builder().build();
        ByteBuffer buffer = body.serializeWithHeader(
            new RequestHeader(ApiKeys.API_VERSIONS, body.version(), clientId, 1));
        RequestHeader header = RequestHeader.parse(buffer);
        RequestContext context = new RequestContext(header, "connection-1", CLIENT_ADDRESS,
            new KafkaPrincipal(KafkaPrincipal.USER_TYPE, user),
            ListenerName.forSecurityProtocol(SecurityProtocol.PLAINTEXT), SecurityProtocol.PLAINTEXT,
            ClientInformation.EMPTY, false);
        RequestChannel.Request request = new RequestChannel.Request(1, context, 0L, MemoryPool.NONE,
            buffer, null, scala.Option.empty());
        request.requestDequeueTimeNanos_$eq(0L);
        request.apiLocalCompleteTimeNanos_$eq(threadTimeNanos);
        return request;
    }

    static ClientQuotaManager.BaseUserEntity userEntity(JsonNode spec) {
        if (spec == null || spec.isNull()) return null;
        String text = spec.asText();
        if (text.equals("D")) return ClientQuotaManager.DefaultUserEntity$.MODULE$;
        // As the broker's ClientQuotaMetadataManager: user entities are sanitized names.
        return new ClientQuotaManager.UserEntity(Sanitizer.sanitize(text.substring(2)));
    }

    static ClientQuotaEntity.ConfigEntity clientEntity(JsonNode spec) {
        if (spec == null || spec.isNull()) return null;
        String text = spec.asText();
        if (text.equals("D")) return ClientQuotaManager.DefaultClientIdEntity$.MODULE$;
        return new ClientQuotaManager.ClientIdEntity(text.substring(2));
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
            public Long lastThrottleTimeMs() {
                return quota instanceof AbstractControllerMutationQuota
                    ? ((AbstractControllerMutationQuota) quota).lastThrottleTimeMs() : null;
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
            manager.updateQuota(scala.Option.apply(userEntity(user)), scala.Option.apply(clientEntity(client)),
                quota == null ? scala.Option.empty() : scala.Option.apply(new Quota(quota, true)));
        }

        @Override
        public int record(String user, String client, double value, long nowMs) {
            return manager.maybeRecordAndGetThrottleTimeMs(request(user, client, 0L), value, nowMs);
        }

        @Override
        public void unrecord(String user, String client, double value, long nowMs) {
            manager.unrecordQuotaSensor(request(user, client, 0L), value, nowMs);
        }

        @Override
        public void recordNoThrottle(String user, String client, double value) {
            manager.recordNoThrottle(session(user), client, value);
        }

        @Override
        public void throttle(String user, String client, Runnable onEnd, int throttleMs) {
            manager.throttle(request(user, client, 0L), callback(onEnd), throttleMs);
        }

        @Override
        public double maxValueInQuotaWindow(String user, String client) {
            return manager.getMaxValueInQuotaWindow(session(user), client);
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

        private static Handled handled(RequestChannel.Request request, int throttleMs) {
            return new Handled() {
                @Override
                public int throttleMs() {
                    return throttleMs;
                }

                @Override
                public LongConsumer networkCallback() {
                    scala.Option<Consumer<Long>> hook = request.recordNetworkThreadTimeCallback();
                    return hook.isDefined() ? hook.get()::accept : null;
                }
            };
        }

        @Override
        public Handled recordRequest(String user, String client, long threadNanos, long nowMs) {
            RequestChannel.Request request = request(user, client, threadNanos);
            return handled(request, requests.maybeRecordAndGetThrottleTimeMs(request, nowMs));
        }

        @Override
        public Handled recordExempt(String user, String client, long threadNanos) {
            RequestChannel.Request request = request(user, client, threadNanos);
            requests.maybeRecordExempt(request);
            return handled(request, 0);
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
        public int record(String user, String client, double value, long nowMs) {
            return mutations.maybeRecordAndGetThrottleTimeMs(session(user), client, value, nowMs);
        }

        @Override
        public Mutation newQuota(String user, String client, boolean strict) {
            return mutation(strict ? mutations.newStrictQuotaFor(session(user), client)
                : mutations.newPermissiveQuotaFor(session(user), client));
        }
    }
}
