//! A broker's quota managers as the proxy holds them: produce, fetch and request, the
//! controller-mutation manager and the connection rates (KIP-612) when given, and their
//! siblings for the other brokers of a gateway.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use kquota_core::{
    monotonic_ms, ConnectionQuotas, ControllerMutationQuotaManager, QuotaCallback, QuotaManager,
    RequestPath,
};

/// A broker's produce, fetch and request quota managers, and its controller-mutation
/// manager and connection rates when given, shared with their owner (who may change their
/// quotas while the proxy runs).
#[derive(Clone)]
pub struct Managers {
    produce: Arc<QuotaManager>,
    fetch: Arc<QuotaManager>,
    request: Arc<QuotaManager>,
    mutation: Option<Arc<ControllerMutationQuotaManager>>,
    admission: Option<Arc<Admission>>,
    new_callback: Option<CallbackFactory>,
}

/// Makes a new instance of the quota callback, for another broker's managers.
pub type CallbackFactory =
    Arc<dyn Fn() -> kquota_core::Result<Arc<dyn QuotaCallback>> + Send + Sync>;

impl Managers {
    /// The three managers, which must be of the produce, fetch and request type.
    pub fn new(
        produce: Arc<QuotaManager>,
        fetch: Arc<QuotaManager>,
        request: Arc<QuotaManager>,
    ) -> kquota_core::Result<Self> {
        RequestPath::new(&produce, &fetch, &request)?;
        Ok(Managers {
            produce,
            fetch,
            request,
            mutation: None,
            admission: None,
            new_callback: None,
        })
    }

    /// With the controller-mutation quota (KIP-599) of CreateTopics, CreatePartitions and
    /// DeleteTopics, applied while its quotas are enabled.
    pub fn with_mutation(mut self, mutation: Arc<ControllerMutationQuotaManager>) -> Self {
        self.mutation = Some(mutation);
        self
    }

    /// With the connection-creation rates (KIP-612) applied to new connections.
    pub fn with_admission(mut self, admission: Admission) -> Self {
        self.admission = Some(Arc::new(admission));
        self
    }

    /// With `new_callback`, which makes another broker's instance of the managers' quota
    /// callback (each Kafka broker has its own): what [`Self::for_another_broker`] needs when the
    /// managers have one.
    pub fn with_callback_factory(mut self, new_callback: CallbackFactory) -> Self {
        self.new_callback = Some(new_callback);
        self
    }

    /// Whether [`Self::for_another_broker`] can make siblings: managers with a quota callback need a
    /// callback factory.
    pub fn check_for_other_brokers(&self) -> kquota_core::Result<()> {
        if self.new_callback.is_none() && self.each().iter().any(|m| m.callback().is_some()) {
            return Err(kquota_core::Error::InvalidConfig(
                "managers with a quota callback need a callback factory to make another \
                 broker's: each broker has a callback instance of its own"
                    .to_owned(),
            ));
        }
        Ok(())
    }

    /// The managers of another broker of the cluster: siblings sharing these managers'
    /// quotas, with sensors of their own, and with a new instance of the quota callback
    /// (one for the three) if the managers have one.
    pub fn for_another_broker(&self) -> kquota_core::Result<Self> {
        self.check_for_other_brokers()?;
        let callback = match &self.new_callback {
            Some(make) if self.each().iter().any(|m| m.callback().is_some()) => Some(make()?),
            _ => None,
        };
        let another = |m: &QuotaManager| -> kquota_core::Result<Arc<QuotaManager>> {
            Ok(Arc::new(match (&callback, m.callback()) {
                (Some(cb), Some(_)) => m.for_another_broker_with_callback(Arc::clone(cb))?,
                _ => m.for_another_broker()?,
            }))
        };
        Ok(Managers {
            produce: another(&self.produce)?,
            fetch: another(&self.fetch)?,
            request: another(&self.request)?,
            mutation: self
                .mutation
                .as_ref()
                .map(|m| Arc::new(m.for_another_broker())),
            admission: self
                .admission
                .as_ref()
                .map(|a| Arc::new(a.for_another_broker())),
            new_callback: self.new_callback.clone(),
        })
    }

    /// The produce, fetch and request managers, in that order.
    pub fn quota_managers(&self) -> [&Arc<QuotaManager>; 3] {
        [&self.produce, &self.fetch, &self.request]
    }

    /// The controller-mutation manager, if any.
    pub fn mutation(&self) -> Option<&Arc<ControllerMutationQuotaManager>> {
        self.mutation.as_ref()
    }

    /// The connection-creation rates, if any.
    pub fn admission(&self) -> Option<&Arc<Admission>> {
        self.admission.as_ref()
    }

    pub(crate) fn path(&self) -> RequestPath<'_> {
        RequestPath::new(&self.produce, &self.fetch, &self.request)
            .expect("manager types checked by Managers::new")
    }

    pub(crate) fn each(&self) -> [&QuotaManager; 3] {
        [&self.produce, &self.fetch, &self.request]
    }

    /// Drains the delay queues as mutes end and, with `expire`, removes idle sensors;
    /// returns when the next mute ends.
    pub(crate) fn maintain(&self, now: i64, expire: bool) -> Option<i64> {
        for manager in self.each() {
            manager.expired_channels(now);
            if expire {
                manager.expire_sensors(now);
            }
        }
        if let Some(mutation) = &self.mutation {
            mutation.expired_channels(now);
            if expire {
                mutation.expire_sensors(now);
            }
        }
        if let (Some(admission), true) = (&self.admission, expire) {
            admission.quotas.expire_sensors(now);
        }
        self.each()
            .iter()
            .filter_map(|m| m.next_unmute_ms())
            .chain(self.mutation.as_ref().and_then(|m| m.next_unmute_ms()))
            .min()
    }
}
/// KIP-612 at the proxy's route: each new connection waits out the broker's and the
/// listener's `max.connection.creation.rate` (in the accept loop, one at a time and in the
/// order they came, as Kafka's acceptor thread accepts them), then is checked against its
/// IP's `connection_creation_rate`: one over it is accepted and closed after the throttle
/// time, unread.
pub struct Admission {
    quotas: Arc<ConnectionQuotas>,
    listener: String,
    ip_throttled: AtomicU64,
}

impl Admission {
    /// `quotas` applied to new connections, counted under `listener` (added to them if
    /// they lack it).
    pub fn new(quotas: Arc<ConnectionQuotas>, listener: &str) -> kquota_core::Result<Self> {
        if !quotas.listeners().iter().any(|(name, _)| name == listener) {
            quotas.add_listener(listener, None)?;
        }
        Ok(Admission {
            quotas,
            listener: listener.to_owned(),
            ip_throttled: AtomicU64::new(0),
        })
    }

    /// Another broker's route: the same connection quotas' configuration and listener,
    /// with sensors of its own ([`ConnectionQuotas::for_another_broker`]).
    pub fn for_another_broker(&self) -> Self {
        Admission {
            quotas: Arc::new(self.quotas.for_another_broker()),
            listener: self.listener.clone(),
            ip_throttled: AtomicU64::new(0),
        }
    }

    /// The connection quotas applied (shared, not a copy).
    pub fn quotas(&self) -> &Arc<ConnectionQuotas> {
        &self.quotas
    }

    /// Connections closed unread because their IP was over its `connection_creation_rate`.
    pub fn ip_throttled(&self) -> u64 {
        self.ip_throttled.load(Ordering::Relaxed)
    }

    /// The acceptor's part for a connection from `ip`: its delay waited out, then its
    /// IP's throttle (0: admitted; > 0: close it after that many ms, unread).
    pub(crate) async fn accept(&self, ip: &str) -> kquota_core::Result<i32> {
        let delay = self.quotas.accept_delay(&self.listener, monotonic_ms())?;
        if delay > 0 {
            tokio::time::sleep(Duration::from_millis(delay as u64)).await;
        }
        let throttle = self.quotas.admit_ip(&self.listener, ip, monotonic_ms())?;
        if throttle > 0 {
            self.ip_throttled.fetch_add(1, Ordering::Relaxed);
        }
        Ok(throttle)
    }
}
