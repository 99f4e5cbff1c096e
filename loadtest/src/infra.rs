//! What the scenarios start: anteroom (the release binary, as its own process so its RSS is
//! its own), nginx (origin and plain reverse proxy), and Redis (reusing
//! `anteroom_fixtures::RedisServer`). Everything is bound to loopback and killed on drop.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

pub const ADMIN_TOKEN: &str = "bench-admin-token-0123456789abcdef";

/// A private temporary directory, removed on drop.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(tag: &str) -> anyhow::Result<Scratch> {
        static N: AtomicU64 = AtomicU64::new(0);
        let path = std::env::temp_dir().join(format!(
            "anteroom-bench-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path)?;
        Ok(Scratch(path))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A loopback port that is free now.
pub fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Waits until something accepts TCP connections on `addr` (bounded).
pub fn wait_listening(addr: SocketAddr, child: &mut Child, what: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait()? {
            bail!("{what} exited at start: {status}");
        }
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    bail!("{what} did not listen on {addr} within 20 s")
}

/// Resident set size and its peak of a process, in bytes (`/proc/<pid>/status`).
pub fn rss(pid: u32) -> anyhow::Result<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let field = |name: &str| -> anyhow::Result<u64> {
        let line = status
            .lines()
            .find(|l| l.starts_with(name))
            .with_context(|| format!("no {name} in /proc/{pid}/status"))?;
        let kb: u64 = line
            .split_whitespace()
            .nth(1)
            .context("malformed status line")?
            .parse()?;
        Ok(kb * 1024)
    };
    Ok((field("VmRSS:")?, field("VmHWM:")?))
}

/// CPU time used so far by a process and its direct children, in seconds.
#[derive(Clone, Copy, Debug, Default)]
pub struct CpuTime {
    pub user: f64,
    pub system: f64,
}

impl CpuTime {
    pub fn total(self) -> f64 {
        self.user + self.system
    }

    /// What was used between `before` and `self`.
    pub fn since(self, before: CpuTime) -> CpuTime {
        CpuTime {
            user: self.user - before.user,
            system: self.system - before.system,
        }
    }
}

impl std::ops::AddAssign for CpuTime {
    fn add_assign(&mut self, other: CpuTime) {
        self.user += other.user;
        self.system += other.system;
    }
}

/// CPU time (user + system, in seconds) used so far by process `pid` and its direct
/// children (nginx's workers).
pub fn cpu_secs(pid: u32) -> anyhow::Result<f64> {
    cpu_time(pid).map(CpuTime::total)
}

/// CPU time (user + system, in seconds) used so far by this process alone: not the
/// servers it started.
pub fn own_cpu_secs() -> anyhow::Result<f64> {
    process_cpu(std::process::id(), false).map(CpuTime::total)
}

/// CPU time (in seconds, to the nanosecond) used so far by the live threads of process
/// `pid`, from each thread's `/proc/<pid>/task/<tid>/schedstat`: finer than
/// [`cpu_secs`]'s 10 ms ticks, for phases of a fraction of a second. A thread that has
/// exited is not counted (a server's workers live as long as it does).
pub fn threads_cpu_secs(pid: u32) -> anyhow::Result<f64> {
    let mut ns = 0u64;
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))?.flatten() {
        // A thread may exit between the listing and the read.
        let Ok(stat) = std::fs::read_to_string(task.path().join("schedstat")) else {
            continue;
        };
        ns += stat
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<u64>().ok())
            .context("malformed schedstat")?;
    }
    Ok(ns as f64 / 1e9)
}

/// Pins every thread of this process to `cpus` (`taskset -c` syntax); threads started
/// later inherit it.
pub fn pin_self(cpus: &str) -> anyhow::Result<()> {
    pin(std::process::id(), cpus)
}

/// Pins every thread of process `pid` to `cpus` (`taskset -c` syntax).
pub fn pin(pid: u32, cpus: &str) -> anyhow::Result<()> {
    let status = Command::new("taskset")
        .args(["-a", "-p", "-c", cpus, &pid.to_string()])
        .stdout(Stdio::null())
        .status()
        .context("cannot run taskset")?;
    if !status.success() {
        bail!("taskset -a -p -c {cpus} failed: {status}");
    }
    Ok(())
}

/// [`cpu_secs`] split into user and system time.
pub fn cpu_time(pid: u32) -> anyhow::Result<CpuTime> {
    process_cpu(pid, true)
}

/// From `/proc/<pid>/stat` (and its children's, if asked); clock ticks assumed 100 Hz,
/// which is what Linux reports to user space on every architecture we run on.
fn process_cpu(pid: u32, with_children: bool) -> anyhow::Result<CpuTime> {
    fn fields(stat: &str) -> Option<(u32, u64, u64)> {
        // After the `(comm)` field: state, ppid, … utime is field 14, stime 15 (1-based).
        let rest = &stat[stat.rfind(')')? + 2..];
        let f: Vec<&str> = rest.split_whitespace().collect();
        let ppid = f.get(1)?.parse().ok()?;
        let user = f.get(11)?.parse::<u64>().ok()?;
        let system = f.get(12)?.parse::<u64>().ok()?;
        Some((ppid, user, system))
    }
    let own = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let (_, mut user, mut system) = fields(&own).context("malformed /proc stat")?;
    let children = if with_children {
        std::fs::read_dir("/proc")?.flatten().collect()
    } else {
        Vec::new()
    };
    for entry in children {
        let Some(child) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat"))
            && let Some((ppid, u, s)) = fields(&stat)
            && ppid == pid
        {
            user += u;
            system += s;
        }
    }
    Ok(CpuTime {
        user: user as f64 / 100.0,
        system: system as f64 / 100.0,
    })
}

/// A child process killed (SIGKILL) and reaped on drop.
pub struct Proc {
    pub child: Child,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How an anteroom under test is configured.
#[derive(Clone, Debug)]
pub struct AnteroomSpec {
    pub redis_url: Option<String>,
    pub origin: String,
    pub rate: f64,
    pub max_active: u64,
    pub admit_interval: &'static str,
    pub max_connections: usize,
    pub session_ttl: &'static str,
    pub abandon_after: &'static str,
    /// Top-level YAML lines added as written (`access_log: …`, `trusted_proxies: …`,
    /// `abuse: …`), each ending in a newline.
    pub top_extra: String,
    /// Lines added to the `server:` section, each indented two spaces and ending in a
    /// newline.
    pub server_extra: String,
    /// Lines added to room `main`, each indented four spaces and ending in a newline.
    pub room_extra: String,
    /// The cookie secret (hex); a fresh random one when unset. Instances that share it
    /// accept each other's challenges and cookies.
    pub cookie_secret: Option<String>,
    /// CPUs the process is pinned to (`taskset -c` syntax); unpinned when unset.
    pub cpus: Option<String>,
}

impl AnteroomSpec {
    pub fn new(redis_url: Option<String>) -> Self {
        AnteroomSpec {
            redis_url,
            // Nothing listens here: rooms that only queue never reach their origin.
            origin: "http://127.0.0.1:9".into(),
            rate: 1_000.0,
            max_active: 100_000_000,
            admit_interval: "250ms",
            max_connections: 10_000,
            session_ttl: "1h",
            abandon_after: "1h",
            top_extra: String::new(),
            room_extra: String::new(),
            server_extra: String::new(),
            cookie_secret: None,
            cpus: None,
        }
    }
}

/// A fresh random cookie secret, as hex.
pub fn random_secret() -> String {
    hex(&[
        anteroom::queue::VisitorId::random().0,
        anteroom::queue::VisitorId::random().0,
    ]
    .concat())
}

/// The release binary `target/release/anteroom`, beside this harness (or `ANTEROOM_BIN`).
pub fn anteroom_binary() -> anyhow::Result<PathBuf> {
    if let Ok(bin) = std::env::var("ANTEROOM_BIN") {
        return Ok(bin.into());
    }
    let exe = std::env::current_exe()?;
    let bin = exe.with_file_name("anteroom");
    if !bin.exists() {
        bail!(
            "{} not found: build it first (cargo build --release), or set ANTEROOM_BIN",
            bin.display()
        );
    }
    Ok(bin)
}

/// One anteroom process on a free loopback port.
pub struct Anteroom {
    pub addr: SocketAddr,
    proc: Proc,
    _dir: Scratch,
}

impl Anteroom {
    pub fn start(spec: &AnteroomSpec) -> anyhow::Result<Anteroom> {
        let dir = Scratch::new("anteroom")?;
        let port = free_port()?;
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse()?;
        let secret = spec.cookie_secret.clone().unwrap_or_else(random_secret);
        let redis = spec
            .redis_url
            .as_deref()
            .map(|u| format!("redis:\n  url: \"{u}\"\n"))
            .unwrap_or_default();
        let config = format!(
            r#"listen: "{addr}"
admit_interval: {interval}
cookie_secret: "{secret}"
admin_token: "{ADMIN_TOKEN}"
data_dir: "{data}"
{top_extra}{redis}server:
  max_connections: {max_conns}
  idle_timeout: 300s
{server_extra}rooms:
  main:
    origin: {origin}
    rate: {rate}
    max_active: {max_active}
    session_ttl: {session_ttl}
    abandon_after: {abandon_after}
    join_limit_per_ip: 0
    max_sessions_per_client: 0
    max_places_per_client: 0
    session_clients: 0
{room_extra}"#,
            interval = spec.admit_interval,
            secret = secret,
            data = dir.0.join("data").display(),
            max_conns = spec.max_connections,
            server_extra = spec.server_extra,
            origin = spec.origin,
            rate = spec.rate,
            max_active = spec.max_active,
            session_ttl = spec.session_ttl,
            abandon_after = spec.abandon_after,
            top_extra = spec.top_extra,
            room_extra = spec.room_extra,
        );
        let path = dir.0.join("anteroom.yaml");
        std::fs::write(&path, config)?;
        // `taskset` execs the binary, so the child's pid is anteroom's own.
        let mut command = match &spec.cpus {
            Some(cpus) => {
                let mut c = Command::new("taskset");
                c.arg("-c").arg(cpus).arg(anteroom_binary()?);
                c
            }
            None => Command::new(anteroom_binary()?),
        };
        let child = command
            .arg("--config")
            .arg(&path)
            .env("ANTEROOM_LOG", "error")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .context("cannot start anteroom")?;
        let mut proc = Proc { child };
        wait_listening(addr, &mut proc.child, "anteroom")?;
        Ok(Anteroom {
            addr,
            proc,
            _dir: dir,
        })
    }

    pub fn pid(&self) -> u32 {
        self.proc.child.id()
    }

    /// Its `data_dir` (the audit log, the snapshots).
    pub fn data_dir(&self) -> PathBuf {
        self._dir.0.join("data")
    }

    pub fn rss(&self) -> anyhow::Result<(u64, u64)> {
        rss(self.pid())
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// nginx (Debian) with a generated config, on loopback, in the foreground.
pub struct Nginx {
    pub addr: SocketAddr,
    _proc: Proc,
    _dir: Scratch,
}

impl Nginx {
    /// An origin answering every request with a small fixed body (one worker).
    pub fn origin() -> anyhow::Result<Nginx> {
        Self::start(
            1,
            "location / { return 200 \"hello from the origin\\n\"; }",
            "",
        )
    }

    /// A plain reverse proxy to `upstream` with pooled upstream connections, the fair
    /// configuration for a throughput comparison. `workers` should match the cores anteroom
    /// may use.
    pub fn reverse_proxy(upstream: SocketAddr, workers: usize) -> anyhow::Result<Nginx> {
        let upstream_block = format!("upstream origin {{ server {upstream}; keepalive 128; }}");
        Self::start(
            workers,
            "location / { proxy_pass http://origin; proxy_http_version 1.1; \
             proxy_set_header Connection \"\"; proxy_buffering on; }",
            &upstream_block,
        )
    }

    /// nginx in front of a FastCGI server (`php`), every path running its one script, as
    /// a PHP site is served: `workers` nginx workers, no caching, FastCGI connections not
    /// kept alive (nginx's default).
    pub fn fastcgi(php: &PhpFpm, workers: usize) -> anyhow::Result<Nginx> {
        let location = format!(
            "location / {{ fastcgi_pass {addr}; \
             fastcgi_param SCRIPT_FILENAME {script}; fastcgi_param SCRIPT_NAME /page.php; \
             fastcgi_param REQUEST_METHOD $request_method; fastcgi_param REQUEST_URI $request_uri; \
             fastcgi_param QUERY_STRING $query_string; fastcgi_param CONTENT_TYPE $content_type; \
             fastcgi_param CONTENT_LENGTH $content_length; fastcgi_param SERVER_PROTOCOL $server_protocol; \
             fastcgi_param REMOTE_ADDR $remote_addr; fastcgi_param SERVER_NAME $server_name; \
             fastcgi_read_timeout 120s; }}",
            addr = php.addr,
            script = php.script.display(),
        );
        Self::start(workers, &location, "")
    }

    fn start(workers: usize, location: &str, http_extra: &str) -> anyhow::Result<Nginx> {
        let dir = Scratch::new("nginx")?;
        let port = free_port()?;
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse()?;
        let d = dir.0.display();
        let conf = format!(
            r#"worker_processes {workers};
daemon off;
error_log {d}/error.log error;
pid {d}/nginx.pid;
worker_rlimit_nofile 65536;
events {{ worker_connections 16384; }}
http {{
  access_log off;
  client_body_temp_path {d}/body;
  proxy_temp_path {d}/proxy;
  fastcgi_temp_path {d}/fastcgi;
  uwsgi_temp_path {d}/uwsgi;
  scgi_temp_path {d}/scgi;
  keepalive_requests 1000000;
  {http_extra}
  server {{ listen {addr}; {location} }}
}}
"#
        );
        let path = dir.0.join("nginx.conf");
        std::fs::write(&path, conf)?;
        let child = Command::new(nginx_binary())
            .arg("-c")
            .arg(&path)
            .arg("-p")
            .arg(&dir.0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .context("cannot start nginx (apt-get install nginx-light)")?;
        let mut proc = Proc { child };
        wait_listening(addr, &mut proc.child, "nginx")?;
        Ok(Nginx {
            addr,
            _proc: proc,
            _dir: dir,
        })
    }

    /// The master's pid (its workers are its children).
    pub fn pid(&self) -> u32 {
        self._proc.child.id()
    }
}

impl Drop for Nginx {
    /// A SIGKILLed master leaves its workers running (orphaned, still listening): ask it
    /// to stop fast (SIGTERM) and wait for it, bounded; `Proc` then kills whatever is left.
    fn drop(&mut self) {
        let pid = self._proc.child.id().to_string();
        if Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .is_ok_and(|s| s.success())
        {
            let deadline = Instant::now() + Duration::from_secs(3);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = self._proc.child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

fn nginx_binary() -> &'static str {
    if Path::new("/usr/sbin/nginx").exists() {
        "/usr/sbin/nginx"
    } else {
        "nginx"
    }
}

/// Redis `used_memory` in bytes.
pub fn used_memory(redis: &anteroom_fixtures::RedisServer) -> anyhow::Result<u64> {
    let info = redis.cli(&["INFO", "memory"]);
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .context("no used_memory in INFO memory (is redis-cli installed?)")?
        .trim()
        .parse()
        .context("used_memory")
}

/// Raises this process's open-file limit (soft and hard; root may raise the hard one) so
/// tens of thousands of sockets fit. Children (anteroom) inherit it.
pub fn raise_nofile(want: u64) -> anyhow::Result<u64> {
    let (soft, hard) = rlimit::getrlimit(rlimit::Resource::NOFILE)?;
    if soft >= want {
        return Ok(soft);
    }
    if hard < want && rlimit::setrlimit(rlimit::Resource::NOFILE, want, want).is_ok() {
        return Ok(want);
    }
    rlimit::setrlimit(rlimit::Resource::NOFILE, want.min(hard), hard)?;
    Ok(want.min(hard))
}

/// The 1-, 5- and 15-minute load averages (`/proc/loadavg`), as written there.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "?".into())
}

/// The machine, for the report.
pub fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|v| v.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        })
        .map(|kb| format!("{:.1} GiB", kb as f64 / 1024.0 / 1024.0))
        .unwrap_or_else(|| "unknown memory".into());
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let redis = Command::new("redis-server")
        .arg("--version")
        .output()
        .ok()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .find_map(|w| w.strip_prefix("v="))
                .unwrap_or("?")
                .to_owned()
        })
        .unwrap_or_else(|| "?".into());
    let nginx = Command::new(nginx_binary())
        .arg("-v")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stderr).trim().to_owned())
        .unwrap_or_default();
    format!("{cores} cores ({cpu}), {mem} RAM; Redis {redis}; {nginx}; wrk (Debian)")
}

/// The first of `/usr/sbin/php-fpm*` (Debian names it by version: `php-fpm8.2`), or
/// `php-fpm` on the `PATH`.
pub fn php_fpm_binary() -> anyhow::Result<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/sbin")
        .map(|dir| {
            dir.flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("php-fpm"))
                })
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    if let Some(bin) = found.pop() {
        return Ok(bin);
    }
    let on_path = Command::new("sh")
        .args(["-c", "command -v php-fpm"])
        .output()
        .context("looking for php-fpm")?;
    let path = String::from_utf8_lossy(&on_path.stdout).trim().to_owned();
    if path.is_empty() {
        bail!("php-fpm not found (scripts/test-tools.sh installs Debian's php-fpm)");
    }
    Ok(path.into())
}

/// PHP-FPM (Debian's) in the foreground with its own config in a temporary directory: one
/// pool, `pm = static` with `workers` children, listening on a loopback port, serving
/// one script that sleeps `page_ms` and then answers a few bytes. A real slow origin with
/// few workers: a request beyond the children waits in the listen backlog.
pub struct PhpFpm {
    /// Where the pool listens (FastCGI).
    pub addr: SocketAddr,
    /// The script every request runs.
    pub script: PathBuf,
    proc: Proc,
    _dir: Scratch,
}

impl PhpFpm {
    /// Starts the pool and waits until it listens (bounded).
    pub fn start(workers: usize, page_ms: u64) -> anyhow::Result<PhpFpm> {
        let dir = Scratch::new("php-fpm")?;
        let port = free_port()?;
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse()?;
        let d = dir.0.display();
        let script = dir.0.join("page.php");
        std::fs::write(
            &script,
            format!(
                "<?php\nusleep({us});\nheader('Content-Type: text/html; charset=utf-8');\n\
                 echo \"page \", htmlspecialchars($_SERVER['REQUEST_URI'] ?? '/'), \"\\n\";\n",
                us = page_ms * 1000
            ),
        )?;
        // Running as root needs -R and no user/group lines; otherwise the pool runs as
        // whoever starts it.
        let conf = format!(
            r#"[global]
pid = {d}/php-fpm.pid
error_log = {d}/php-fpm.log
daemonize = no
log_level = error

[site]
listen = {addr}
listen.backlog = 4096
pm = static
pm.max_children = {workers}
pm.max_requests = 0
request_terminate_timeout = 60s
catch_workers_output = yes
clear_env = no
"#
        );
        let path = dir.0.join("php-fpm.conf");
        std::fs::write(&path, conf)?;
        let bin = php_fpm_binary()?;
        let child = Command::new(&bin)
            .arg("--nodaemonize")
            .arg("--fpm-config")
            .arg(&path)
            .arg("--allow-to-run-as-root")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("cannot start {}", bin.display()))?;
        let mut proc = Proc { child };
        wait_listening(addr, &mut proc.child, "php-fpm")?;
        Ok(PhpFpm {
            addr,
            script,
            proc,
            _dir: dir,
        })
    }
}

impl Drop for PhpFpm {
    /// SIGQUIT stops the master and its children (a SIGKILLed master would orphan them);
    /// bounded, then `Proc` kills whatever is left.
    fn drop(&mut self) {
        let pid = self.proc.child.id().to_string();
        if Command::new("kill")
            .args(["-QUIT", &pid])
            .status()
            .is_ok_and(|s| s.success())
        {
            let deadline = Instant::now() + Duration::from_secs(3);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = self.proc.child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}
