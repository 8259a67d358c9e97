//! The quota managers a broker runs, built from [`crate::kafka`]'s rules on
//! [`crate::sync`]'s machinery: the client-quota manager and its custom callbacks, the
//! controller-mutation quota, the connection quotas, and the request path over three
//! managers.

pub mod callback;
pub mod connection_quota;
pub mod manager;
pub mod mutation;
pub mod request_path;
