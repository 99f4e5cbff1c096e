//! A real nginx (Debian's, installed by `scripts/test-tools.sh`) in front of anteroom, as
//! docs/operations.md configures it.

use std::time::{Duration, Instant};

/// A real nginx (Debian's) on a free loopback port, proxying to `upstream` with the
/// headers docs/operations.md sets; stopped on drop.
pub struct Nginx {
    child: std::process::Child,
    /// Where nginx listens.
    pub addr: std::net::SocketAddr,
    _dir: tempfile::TempDir,
}

impl Nginx {
    /// Starts nginx in front of `upstream` and waits until it accepts connections.
    pub async fn start(upstream: std::net::SocketAddr) -> Nginx {
        let bin = ["/usr/sbin/nginx", "/usr/bin/nginx"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists())
            .expect("nginx is required (scripts/test-tools.sh installs Debian's nginx)");
        let dir = tempfile::tempdir().unwrap();
        let addr = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let d = dir.path().display();
        // The server block is docs/operations.md's, on plain HTTP and one upstream. One
        // process, no master: killing it at the end leaves no orphaned worker listening.
        let conf = format!(
            "daemon off;\nmaster_process off;\nuser root;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\n\
             events {{ worker_connections 256; }}\n\
             http {{\n access_log off;\n client_body_temp_path {d}/body;\n proxy_temp_path {d}/proxy;\n\
             fastcgi_temp_path {d}/fcgi;\n uwsgi_temp_path {d}/uwsgi;\n scgi_temp_path {d}/scgi;\n\
             upstream anteroom {{ server {upstream}; keepalive 64; keepalive_timeout 50s; }}\n\
             map $http_upgrade $connection_upgrade {{ default upgrade; '' ''; }}\n\
             server {{\n  listen {addr};\n  server_name shop.example;\n  proxy_http_version 1.1;\n\
               proxy_set_header Host              $host;\n\
               proxy_set_header X-Forwarded-For   $proxy_add_x_forwarded_for;\n\
               proxy_set_header X-Forwarded-Proto $scheme;\n\
               proxy_set_header Upgrade           $http_upgrade;\n\
               proxy_set_header Connection        $connection_upgrade;\n\
               location / {{ proxy_pass http://anteroom; }}\n }}\n}}\n"
        );
        std::fs::write(dir.path().join("nginx.conf"), conf).unwrap();
        let child = std::process::Command::new(bin)
            .arg("-p")
            .arg(dir.path())
            .arg("-c")
            .arg(dir.path().join("nginx.conf"))
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while tokio::net::TcpStream::connect(addr).await.is_err() {
            assert!(Instant::now() < deadline, "nginx did not start");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Nginx {
            child,
            addr,
            _dir: dir,
        }
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
