//! Everything HTTP: the request path, the proxy, client identification, pages and streams.

pub mod body;
pub mod client;
pub mod proxy;
