//! The commented config file `anteroom init` prints.

use super::Secret;

/// A complete, commented config file with freshly generated secrets.
pub fn init_yaml() -> String {
    let cookie_secret = Secret::generate_hex(32);
    let admin_token = Secret::generate_hex(24);
    let priority_secret = Secret::generate_hex(32);
    // Without a working generator there is no cookie secret either; fall back to no key.
    let admission_key = crate::fairness::admission_token::AdmissionKey::generate()
        .map(|k| k.to_config_text())
        .unwrap_or_default();
    format!(
        r#"# anteroom configuration. Precedence: flags > ANTEROOM_* environment > this file > defaults.
# Durations are written like 250ms, 60s, 5m. Unknown keys are errors.
# Check it with: anteroom check --config anteroom.yaml

# Address to listen on (":8080" means every interface, port 8080).
listen: ":8080"
# How often each room's admission pass runs (at least 10ms).
admit_interval: 250ms
# Key signing the visitor cookie: 64 hex characters (32 bytes). Keep it secret.
# Can also be set with ANTEROOM_COOKIE_SECRET.
cookie_secret: "{cookie_secret}"
# Older cookie secrets still accepted while rotating (move the old cookie_secret here).
previous_cookie_secrets: []
# Bearer token for the control room and admin API (at least 16 characters).
# Can also be set with ANTEROOM_ADMIN_TOKEN.
admin_token: "{admin_token}"
# Ed25519 key signing the X-Anteroom-Admission header sent to your origin with every
# request of an admitted visitor (base64url of a 32-byte seed, or a PKCS#8 PEM key).
# The origin checks it with the public key at /__anteroom/admission-key. Empty: no header.
# Can also be set with ANTEROOM_ADMISSION_KEY.
admission_key: "{admission_key}"
# Signs priority grants (v1.<room>.<expiry>.<nonce>.<mac>): a visitor carrying one (the
# ar_grant query parameter or the X-Anteroom-Grant header) goes to position 1. At least
# 32 bytes, used as written. Uncomment to enable; mint grants with `anteroom grant`.
# Can also be set with ANTEROOM_PRIORITY_SECRET.
# priority_secret: "{priority_secret}"
# Mark the visitor cookie Secure; turn on when visitors reach you over HTTPS.
secure_cookies: false
# Proxies (CIDRs or addresses) whose X-Forwarded-For header is believed.
trusted_proxies: []
# Where the embedded store keeps snapshots, bans and the audit log.
data_dir: ./anteroom-data
# Your own waiting page: a minijinja template replacing the built-in one (it gets the
# same variables: title, message, position, waiting, eta_text, phase, countdown_text, t
# for the translated strings, data for the page script), and a stylesheet added to the
# built-in pages. Empty: the built-in page.
waiting_template: ""
waiting_stylesheet: ""
# When the queue store is unreachable for fail_open_after, let everyone through (loudly).
fail_open: false
# How long the store must be down before fail_open lets everyone through.
fail_open_after: 30s
# https:// origins are checked against the system's CAs; or set a PEM file whose CAs
# (only those) are trusted for every https:// origin.
# origin_ca_file: /etc/anteroom/origin-ca.pem
redis:
  # Empty: embedded store. Otherwise redis://host:6379/0, rediss://host:6380/0 (TLS), or
  # several cluster nodes separated by commas. Replicas sharing one Redis share one queue.
  url: ""
  # For rediss://: a PEM file whose CAs (only those) are trusted instead of the system's.
  # ca_file: /etc/anteroom/redis-ca.pem
kafka:
  # Brokers (host:port) to publish queue events to; empty: events are not published.
  brokers: []
  # Topic the events are published to.
  topic: anteroom.events
  # librdkafka settings passed through, e.g. for SASL over TLS. The password comes from
  # the ANTEROOM_KAFKA_SASL_PASSWORD environment variable (never put it in this file).
  # properties:
  #   security.protocol: SASL_SSL
  #   sasl.mechanism: SCRAM-SHA-512
  #   sasl.username: anteroom
  #   ssl.ca.location: /etc/anteroom/kafka-ca.pem
# Connection limits and timeouts; every key is optional.
# server:
#   header_read_timeout: 10s     # time a client has to send its request headers
#   idle_timeout: 60s            # keep-alive connections idle longer are closed
#   origin_connect_timeout: 5s   # time allowed to connect to an origin
#   origin_timeout: 30s          # time allowed for the origin's response headers
#   max_connections: 10000       # connections served at once
#   max_connections_per_client: 512  # open connections from one direct peer (trusted proxies exempt)
#   max_streams: 5000            # open waiting-page streams; below max_connections (default: half)
#   max_streams_per_client: 64   # waiting-page streams + WebSocket tunnels of one client
#   http2_max_streams: 100       # concurrent requests on one HTTP/2 connection
#   body_timeout: 60s            # a request body must arrive in full within this
#   shutdown_grace: 30s          # time in-flight requests get to finish at shutdown
# Rooms: each name ([A-Za-z0-9_-], up to 64) has its own queue and limits.
rooms:
  main:
    # Host this room serves (case and port ignored); empty: catch-all (at most one).
    match_host: ""
    # The site behind the room (http:// URL, may include a path prefix).
    origin: http://127.0.0.1:3000
    # Visitors admitted per second.
    rate: 50
    # Visitors on the site at once.
    max_active: 500
    # An admitted visitor's slot is reclaimed after this long without a request.
    session_ttl: 5m
    # A waiting visitor whose page stops checking in is dropped after this long.
    abandon_after: 60s
    # Visitors one client address may add to the line per window; 0 disables.
    join_limit_per_ip: 120
    # The window for join_limit_per_ip.
    join_limit_window: 1m
    # Heading of the waiting page.
    title: "You're in line"
    # Extra text on the waiting page.
    message: ""
    # Forward the visitor's Host header to the origin instead of the origin's host.
    preserve_host: false
    # Draw places at random among everyone who arrived before the doors opened.
    lottery: false
    # HTTP status of the waiting page: 200 (default), 202, 429 or 503.
    # queue_status_code: 200
    # Scheduled drop, RFC 3339 times: queue_opens_at, admits_at, closes_at.
    schedule: {{}}
"#,
        cookie_secret = cookie_secret.as_str(),
        admin_token = admin_token.as_str(),
        admission_key = admission_key.as_str(),
        priority_secret = priority_secret.as_str(),
    )
}
