//! The human-readable summary `anteroom check` prints. Never shows a secret.

use std::fmt::Write as _;
use std::time::Duration;

use super::Config;

pub use crate::queue::redis_client::redact_url;

fn dur(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

impl Config {
    /// What this configuration would run, for `anteroom check`.
    pub fn describe(&self) -> String {
        let mut o = String::new();
        let _ = writeln!(o, "listen:           {}", self.listen);
        if self.redis.is_embedded() {
            let _ = writeln!(
                o,
                "store:            embedded (data dir {})",
                self.data_dir.display()
            );
        } else {
            let _ = writeln!(o, "store:            redis {}", redact_url(&self.redis.url));
            if let Some(ca) = &self.redis.ca_file {
                let _ = writeln!(o, "redis trusts:     {}", ca.path.display());
            }
            if self.redis.password.is_some() {
                let _ = writeln!(
                    o,
                    "redis auth:       password (from redis.password){}",
                    self.redis
                        .username
                        .as_deref()
                        .map(|u| format!(", user {u}"))
                        .unwrap_or_default()
                );
            }
        }
        let _ = writeln!(o, "admit interval:   {}", dur(self.admit_interval));
        let _ = writeln!(
            o,
            "cookies:          {}{}",
            if self.secure_cookies {
                "Secure"
            } else {
                "not Secure"
            },
            if self.previous_cookie_secrets.is_empty() {
                String::new()
            } else {
                format!(
                    ", {} previous secret(s) accepted",
                    self.previous_cookie_secrets.len()
                )
            }
        );
        let _ = writeln!(
            o,
            "admission key:    {}",
            match &self.admission_key {
                Some(k) => format!(
                    "Ed25519 kid {} (X-Anteroom-Admission to the origin)",
                    k.public().kid()
                ),
                None => "none (no X-Anteroom-Admission header)".to_string(),
            }
        );
        let _ = writeln!(
            o,
            "public scheme:    {} (X-Forwarded-Proto unless a trusted proxy sent one)",
            self.public_scheme
        );
        let _ = writeln!(
            o,
            "priority grants:  {}",
            if self.priority_secret.is_some() {
                "on (priority_secret is set)"
            } else {
                "off (no priority_secret)"
            }
        );
        let proxies: Vec<String> = self.trusted_proxies.iter().map(|n| n.to_string()).collect();
        let _ = writeln!(
            o,
            "trusted proxies:  {}",
            if proxies.is_empty() {
                "none (X-Forwarded-For ignored)".to_string()
            } else {
                proxies.join(", ")
            }
        );
        let _ = writeln!(
            o,
            "admin:            {}; {}; metrics token {}",
            match self.admin_listen {
                Some(addr) => format!("own listener {addr} (404 on the public one)"),
                None => "on the public listener".to_string(),
            },
            if self.admin_allow.is_empty() {
                "any client".to_string()
            } else {
                let nets: Vec<String> = self.admin_allow.iter().map(|n| n.to_string()).collect();
                format!("only from {}", nets.join(", "))
            },
            if self.metrics_token.is_some() {
                "set"
            } else {
                "not set"
            }
        );
        let tokens: Vec<String> = std::iter::once(format!("{} (admin)", super::ADMIN_TOKEN_NAME))
            .chain(
                self.admin_tokens
                    .iter()
                    .map(|t| format!("{} ({})", t.name, t.role.as_str())),
            )
            .collect();
        let _ = writeln!(o, "admin tokens:     {}", tokens.join(", "));
        if let Some(pid_file) = &self.pid_file {
            let _ = writeln!(o, "pid file:         {}", pid_file.display());
        }
        let _ = writeln!(o, "access log:       {}", self.access_log);
        let _ = writeln!(
            o,
            "fail open:        {}",
            if self.fail_open {
                format!("yes, after {} of store outage", dur(self.fail_open_after))
            } else {
                "no".to_string()
            }
        );
        let _ = writeln!(
            o,
            "events:           {}",
            if self.kafka.brokers.is_empty() {
                "not published (no kafka brokers)".to_string()
            } else {
                format!(
                    "kafka {} topic {}{}",
                    self.kafka.brokers.join(","),
                    self.kafka.topic,
                    if self.kafka.properties.0.is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", self.kafka.properties.shown().join(", "))
                    }
                )
            }
        );
        let s = &self.server;
        let _ = writeln!(
            o,
            "server:           max {} connections ({} per client), {} waiting-page streams ({} per client), {} h2 streams per connection, heads up to {} bytes, {} workers; header read {}, body {}, idle {}, origin connect {}, origin {}, shutdown grace {}, drain delay {}",
            s.max_connections,
            s.max_connections_per_client,
            s.max_streams,
            s.max_streams_per_client,
            s.http2_max_streams,
            s.max_header_bytes,
            s.workers,
            dur(s.header_read_timeout),
            dur(s.body_timeout),
            dur(s.idle_timeout),
            dur(s.origin_connect_timeout),
            dur(s.origin_timeout),
            dur(s.shutdown_grace),
            dur(s.drain_delay)
        );
        let a = &self.abuse;
        let _ = writeln!(
            o,
            "abuse:            ban after {} strikes in {}, for {} doubling up to {}; remembers {} clients, {} bans",
            a.strikes,
            dur(a.window),
            dur(a.cooldown),
            dur(a.max_cooldown),
            a.max_tracked,
            a.max_bans
        );
        let allow: Vec<String> = a.allow.iter().map(|n| n.to_string()).collect();
        let _ = writeln!(
            o,
            "  allow:          {}",
            if allow.is_empty() {
                "none".to_string()
            } else {
                allow.join(", ")
            }
        );
        let paths: Vec<&str> = a.ban_paths.globs().iter().map(|g| g.as_str()).collect();
        let _ = writeln!(
            o,
            "  ban paths:      {}",
            if paths.is_empty() {
                "none".to_string()
            } else {
                paths.join(", ")
            }
        );
        let _ = writeln!(o, "rooms:            {}", self.rooms.len());
        for r in &self.rooms {
            let _ = writeln!(
                o,
                "  room {} ({})",
                r.name,
                match &r.match_host {
                    Some(h) => format!("host {h}"),
                    None => "catch-all".to_string(),
                }
            );
            let _ = writeln!(
                o,
                "    origin:       {}{}",
                r.origin,
                if r.preserve_host {
                    " (preserving Host)"
                } else {
                    ""
                }
            );
            let _ = writeln!(
                o,
                "    admits:       {} per second, at most {} on the site",
                r.rate, r.max_active
            );
            let _ = writeln!(
                o,
                "    sessions:     expire after {} idle; waiting visitors dropped after {} without heartbeat",
                dur(r.session_ttl),
                dur(r.abandon_after)
            );
            let _ = writeln!(
                o,
                "    join limit:   {}",
                if r.join_limit_per_ip == 0 {
                    "off".to_string()
                } else {
                    format!(
                        "{} per client address per {}",
                        r.join_limit_per_ip,
                        dur(r.join_limit_window)
                    )
                }
            );
            if r.challenge.mode != crate::challenge::ChallengeMode::Off || r.shadow_after > 0 {
                let _ = writeln!(
                    o,
                    "    door:         proof of work {}{}; shadow line {}",
                    r.challenge.mode.as_str(),
                    if r.challenge.mode == crate::challenge::ChallengeMode::Off {
                        String::new()
                    } else {
                        format!(
                            " at {} bits (+1 per strike), {} without JavaScript",
                            crate::challenge::bits_for(r.challenge.difficulty, 0),
                            dur(r.challenge.no_js_wait)
                        )
                    },
                    if r.shadow_after == 0 {
                        "off".to_string()
                    } else {
                        format!("at {} strikes", r.shadow_after)
                    }
                );
            }
            let cap = |n: u32| {
                if n == 0 {
                    "no cap".to_string()
                } else {
                    n.to_string()
                }
            };
            let _ = writeln!(
                o,
                "    per client:   {} sessions, {} places; a cookie from {} clients",
                cap(r.max_sessions_per_client),
                cap(r.max_places_per_client),
                cap(r.session_clients)
            );
            let _ = writeln!(
                o,
                "    page:         {:?}{}, status {}{}",
                r.title,
                if r.message.is_empty() {
                    String::new()
                } else {
                    format!(" / {:?}", r.message)
                },
                r.queue_status_code,
                if r.lottery { ", lottery draw" } else { "" }
            );
            if r.mode != crate::queue::Mode::Queue {
                let _ = writeln!(o, "    mode:         {}", r.mode);
            }
            let cap = |n: u64| {
                if n == 0 {
                    "no cap".to_string()
                } else {
                    n.to_string()
                }
            };
            let list = |l: &[String]| {
                if l.is_empty() {
                    "none".to_string()
                } else {
                    l.join(" ")
                }
            };
            let _ = writeln!(o, "    bypass:       {}", list(&r.bypass_paths));
            let _ = writeln!(o, "    assets:       {}", list(&r.asset_paths));
            let _ = writeln!(
                o,
                "    origin caps:  {} in flight (wait {}), {} streams, {} in line",
                cap(r.max_inflight),
                dur(r.inflight_wait),
                cap(r.stream_cap),
                cap(r.max_waiting)
            );
            if let Some(a) = &r.adaptive {
                let _ = writeln!(
                    o,
                    "    adaptive:     lowered while origin p95 > {} or 5xx > {}%; at least {}/s",
                    dur(a.target_latency),
                    a.max_error_ratio * 100.0,
                    a.min_rate
                );
            }
            let sched = &r.schedule;
            if !sched.is_empty() {
                let t = |t: Option<std::time::SystemTime>| {
                    t.map(|t| humantime::format_rfc3339_seconds(t).to_string())
                        .unwrap_or_else(|| "-".to_string())
                };
                let _ = writeln!(
                    o,
                    "    schedule:     queue opens {}, admits {}, closes {}",
                    t(sched.queue_opens_at),
                    t(sched.admits_at),
                    t(sched.closes_at)
                );
            }
        }
        o
    }
}
