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
# The scheme visitors use, sent to the origin as X-Forwarded-Proto when no trusted proxy
# sent one: http or https (set https behind a TLS load balancer that does not send it).
public_scheme: http
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
# A second address serving only the control room, the admin API and /metrics (e.g.
# 127.0.0.1:9090); the public listener then answers 404 under /__anteroom/admin/.
# Empty: they are served on `listen`.
admin_listen: ""
# Client addresses (CIDRs) allowed to reach the admin at all; others get 403. The client
# is the direct peer, or what a trusted proxy forwarded for. Empty: anyone with the token.
admin_allow: []
# A second bearer token that may only read the metrics (GET .../api/metrics and /metrics):
# give it to Prometheus. At least 16 characters; empty: only admin_token reads them.
# Can also be set with ANTEROOM_METRICS_TOKEN.
metrics_token: ""
# One JSON line per request (time, request_id, client, room, class, decision, status,
# bytes, duration_ms, the visitor's ref; never the cookie or the query): off, stdout, or a
# file (appended to, mode 0600), which SIGHUP reopens for logrotate.
# Can also be set with ANTEROOM_ACCESS_LOG.
access_log: off
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
#   max_streams_per_client: 64   # waiting-page streams + tunnels + origin event streams, one client
#   http2_max_streams: 100       # concurrent requests on one HTTP/2 connection
#   max_header_bytes: 16384      # largest request head (request line + headers); more is a 431
#   workers: 2                   # serving threads (default: one per CPU)
#   body_timeout: 60s            # a request body must arrive in full within this
#   shutdown_grace: 30s          # time in-flight requests get to finish at shutdown
#   drain_delay: 0s              # on SIGTERM, readyz is 503 this long before the listener
#                                # closes (e.g. 5s behind a load balancer)
# The abuse registry (bans); every key is optional. A client is an IPv4 address or an
# IPv6 /64. Weighted strikes (a forged cookie or wrong admin token 5, a join refused by the
# join limit 1) within `window` reaching `strikes` ban the client for `cooldown`, doubling
# with each repeat ban up to `max_cooldown`. A request to one of `ban_paths` (globs like
# /.env, /.git/**, *.php) bans at once. `allow` (CIDRs) and trusted_proxies are never
# banned: put your own office network there to be able to unban yourself.
# abuse:
#   strikes: 20
#   window: 1m
#   cooldown: 1m
#   max_cooldown: 24h
#   allow: []
#   ban_paths: []                # e.g. ["/.env", "/.git/**", "/wp-login.php"]
#   max_tracked: 100000          # clients whose strikes are remembered (oldest forgotten)
#   max_bans: 100000             # active bans kept; at the cap automatic bans make room
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
    # One client's fair share (a client is an IPv4 address or an IPv6 /64; 0: no cap).
    # Raise them if many visitors share one address (offices, carrier NAT); see
    # "Security model" in docs/security.md.
    # Sessions on the site at once from one client.
    max_sessions_per_client: 32
    # Places in line at once from one client.
    max_places_per_client: 64
    # Distinct clients one admitted cookie may be used from.
    session_clients: 4
    # Heading of the waiting page.
    title: "You're in line"
    # Extra text on the waiting page.
    message: ""
    # Forward the visitor's Host header to the origin instead of the origin's host.
    preserve_host: false
    # Draw places at random among everyone who arrived before the doors opened.
    lottery: false
    # queue (default), passthrough (everybody straight through) or sold_out (the sold-out
    # page for newcomers and the line); switched live through the admin API.
    mode: queue
    # HTTP status of the waiting page: 200 (default), 202, 429 or 503.
    # queue_status_code: 200
    # Path globs (`*` within a segment, `**` across, no leading `/`: the last segment).
    # Proxied straight to the origin: no queue, no cookie (webhooks, health checks, ACME).
    # bypass_paths: ["/webhooks/**", "/.well-known/acme-challenge/**"]
    # Never join the line: served to admitted visitors, else 503 (never the HTML page).
    # asset_paths: ["*.css", "*.js", "/static/**"]
    # WebSocket / SSE streams to the origin open at once (0: no cap).
    # stream_cap: 0
    # Requests in flight to the origin at once on this replica (0: no cap).
    # max_inflight: 0
    # How long a request waits for an in-flight slot before a 503.
    # inflight_wait: 5s
    # The queue breaker: at most this many in line, newcomers get 503 "full" (0: no limit).
    # max_waiting: 0
    # Closed-loop admission: lower the rate actually used while the origin's p95 time to
    # response headers (last 10 s, every replica) is over target_latency or its share of
    # 5xx over max_error_ratio; raised again step by step, never above `rate` nor below
    # min_rate (visitors per second).
    # adaptive: {{target_latency: 800ms, max_error_ratio: 0.05, min_rate: 1}}
    # The proof of work at the door: off, under_load (only while somebody waits) or
    # always; difficulty adds bits to the base 17 (each doubles the work); no_js_wait is
    # the time lock of visitors without JavaScript (docs/challenge.md).
    # challenge: {{mode: off, difficulty: 0, no_js_wait: 20s}}
    # Strikes within abuse.window that park a client in a line that never moves (0: off).
    # shadow_after: 0
    # Scheduled drop, RFC 3339 times: queue_opens_at, admits_at, closes_at.
    schedule: {{}}
"#,
        cookie_secret = cookie_secret.as_str(),
        admin_token = admin_token.as_str(),
        admission_key = admission_key.as_str(),
        priority_secret = priority_secret.as_str(),
    )
}
