//! Responses that name brokers: a gateway's, with each broker's address replaced by its
//! port on the proxy (a broker named for the first time gets its route); and Metadata
//! responses told to the quota callbacks.

use std::sync::Arc;

use bytes::Bytes;
use kquota_core::update_cluster_metadata;

use super::shared::Shared;
use crate::addresses::{with_addresses, BrokerAddress};
use crate::error::Closed;
use crate::gateway::{BrokerChange, Routes};
use crate::header::RequestHeader;
use crate::lock;

/// A gateway's response naming brokers, with each one's address replaced by its port on
/// the proxy: a broker named for the first time gets its route and port first, so that the
/// client can connect as soon as it reads the response. A response the proxy cannot read
/// closes the connection (passing it on would show the client the brokers themselves).
pub(super) fn gateway_addresses(
    shared: &Arc<Shared>,
    routes: &Routes,
    response: Bytes,
    body_offset: usize,
    header: &RequestHeader<'_>,
) -> Result<Bytes, Closed> {
    let advertised = routes.config.advertised_host.clone();
    let mut to = |broker: &BrokerAddress| {
        let upstream = format!("{}:{}", broker.host, broker.port);
        let Some(port) = routes.config.port_of(broker.node_id) else {
            if routes.first_without_port(broker.node_id) {
                (shared.log)(&format!(
                    "broker {} at {upstream} has no port on the gateway (node ids 0 to {} \
                     have one): clients are told its own address",
                    broker.node_id,
                    routes.config.ports - 1
                ));
            }
            return None;
        };
        let siblings = || shared.route.managers.for_another_broker();
        let open = |route| (shared.open_route)(shared, routes, route, port);
        match routes.learn(broker.node_id, &upstream, siblings, open) {
            Ok(BrokerChange::Known | BrokerChange::Opened) => {}
            Ok(BrokerChange::Moved) => {
                (shared.log)(&format!("broker {} is now at {upstream}", broker.node_id));
            }
            Err(err) => {
                (shared.log)(&format!("broker {} at {upstream}: {err}", broker.node_id));
                return None;
            }
        }
        Some((advertised.clone(), i32::from(port)))
    };
    match with_addresses(
        &response,
        body_offset,
        header.api_key,
        header.api_version,
        &mut to,
    ) {
        Ok(Some(rewritten)) => Ok(rewritten.freeze()),
        Ok(None) => Ok(response),
        Err(err) => Err(Closed::Upstream(format!(
            "response naming brokers (API key {} v{}): {err}",
            header.api_key, header.api_version
        ))),
    }
}

/// A Metadata response went through: tell the quota callbacks (if any) when the brokers
/// or partition leaders changed. In gateway mode every broker's callback is told, each as
/// its own broker (every Kafka broker learns the cluster's metadata), and the bootstrap's
/// as no broker. A response that cannot be read or a callback that fails is logged, and
/// the client's response goes on unchanged.
pub(super) fn tell_callback(shared: &Shared, body: &[u8], version: i16) {
    // (A broker's managers have a callback when the listen port's have one.)
    let managers = shared.route.managers.each();
    if managers.iter().all(|m| m.callback().is_none()) {
        return;
    }
    let routes = match &shared.routes {
        Some(_) => shared.all_routes(),
        None => vec![Arc::clone(&shared.route)],
    };
    let metadata = match crate::metadata::cluster_metadata(body, version, shared.local_addr) {
        Ok(metadata) => metadata,
        Err(err) => {
            (shared.log)(&format!(
                "Metadata v{version} response not read for the quota callback: {err}"
            ));
            return;
        }
    };
    for d in routes {
        let mut own = metadata.clone();
        if shared.routes.is_some() {
            own.local_broker = (d.broker >= 0).then_some(d.broker);
        }
        {
            let mut told = lock(&d.told);
            if told.as_ref() == Some(&own) {
                continue;
            }
            *told = Some(own.clone());
        }
        if let Err(err) = update_cluster_metadata(&d.managers.each(), &own) {
            (shared.log)(&format!("quota callback update_cluster_metadata: {err}"));
        }
    }
}
