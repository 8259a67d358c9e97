//! Who has quota administration (DescribeClientQuotas, AlterClientQuotas) answered by the
//! proxy from its store ([`crate::access`]): a principal not listed is refused with
//! Kafka's answer; with `ask_cluster`, the cluster is asked first and its refusal passes
//! through to the client as the broker gave it.

use bytes::BytesMut;

use crate::access::{cluster_probe, cluster_refusal, refusal, AdminAccess};
use crate::error::Closed;
use crate::header::RequestHeader;

/// A response of the proxy's making and where its body starts.
pub(crate) type Response = (BytesMut, usize);

/// What to do with a quota administration request.
#[derive(Debug)]
pub(crate) enum Access {
    /// Answer it from the store.
    Answer,
    /// Refuse it with this answer: the principal is not listed.
    Refuse(Response),
    /// Send the cluster this probe first (on the proxy's own correlation id), and decide
    /// on its answer with [`cluster_says`].
    AskCluster(BytesMut),
}

/// Whether `user` may have the request answered; `own_id` gives the correlation id of a
/// probe, taken only when one is sent.
pub(crate) fn authorize(
    access: &AdminAccess,
    user: &str,
    header: &RequestHeader<'_>,
    frame: &[u8],
    own_id: impl FnOnce() -> i32,
) -> Result<Access, Closed> {
    if !access.lists(user) {
        return refusal(frame, header)
            .map(Access::Refuse)
            .map_err(Closed::request);
    }
    if !access.ask_cluster {
        return Ok(Access::Answer);
    }
    let probe = cluster_probe(frame, header, own_id()).map_err(Closed::request)?;
    Ok(Access::AskCluster(probe))
}

/// The cluster's answer to the probe: `None` when it allows the request, else its refusal,
/// under the client's correlation id.
pub(crate) fn cluster_says(
    response: BytesMut,
    header: &RequestHeader<'_>,
) -> Result<Option<Response>, Closed> {
    cluster_refusal(response, header)
        .map_err(|err| Closed::Upstream(format!("the cluster's answer on quota access: {err}")))
}
