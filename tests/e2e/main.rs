//! The end-to-end tests, in one binary: real origins, a real anteroom (in this process, or
//! the built binary), real Redis and a real Kafka-protocol broker. One binary links the
//! crate and `common` once instead of once per file; each file is a module, so
//! `cargo test --test e2e -- core:: admin::` runs those files' tests.
//!
//! The tests share this process and run in parallel. A test that observes the whole process
//! (its open descriptors) runs alone in a child process of this binary
//! ([`common::run_alone`]); the panic counter counts only panics outside the tests' own code.

mod common;

mod abuse;
mod access_log;
mod adaptive;
mod admin;
mod binary;
mod challenge;
mod chaos;
mod classes;
mod connections;
mod core;
mod draw;
mod events;
mod exhaustion;
mod fairness;
mod fuzz;
mod hostile;
mod kafka;
mod live;
mod malformed;
mod model;
mod modes;
mod ops;
mod pages;
mod priority;
mod reconnect;
mod redis;
mod rooms;
mod security;
mod slowloris;
mod tls;
