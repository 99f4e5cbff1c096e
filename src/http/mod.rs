//! The HTTP vocabulary every listener shares: the response [`body`] type, our own
//! [`pages`] (waiting page, messages, JSON), their [`i18n`] catalogues, the built-in
//! front-end [`assets`] (and the challenge's script), the [`form`] encoding, reading a small request body whole ([`read`]), and the [`scratch`] buffer the per-request header values are cut
//! from. Nothing here decides anything about a request; that is `gate`.

pub mod assets;
pub mod body;
pub mod form;
pub mod i18n;
pub mod pages;
pub mod read;
pub mod scratch;
