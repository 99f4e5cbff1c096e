// Starts what the browser tests drive: a small origin and a real anteroom binary (built
// with the front-end) in front of it, both on loopback, and Debian's chromium through
// playwright-core.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium, type Browser, type Page } from 'playwright-core';

export const WEB_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
export const REPO_DIR = path.resolve(WEB_DIR, '..');
export const ARTIFACTS = path.join(REPO_DIR, 'test-artifacts');

export const CHROMIUM = process.env.CHROMIUM ?? '/usr/bin/chromium';
export const CHROMIUM_FLAGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

export function launchBrowser(): Promise<Browser> {
  if (!existsSync(CHROMIUM)) {
    throw new Error(`${CHROMIUM} is missing: install Debian's chromium (.ci/run does)`);
  }
  // playwright-core gives every launch a fresh temporary profile (--user-data-dir).
  return chromium.launch({ executablePath: CHROMIUM, headless: true, args: CHROMIUM_FLAGS });
}

export interface OriginServer {
  url: string;
  requests: string[];
  close(): Promise<void>;
}

/** A site that answers every request with a page naming the path it was asked for. */
export async function startOrigin(): Promise<OriginServer> {
  const requests: string[] = [];
  const server = http.createServer((req, res) => {
    requests.push(req.url ?? '');
    const uri = (req.url ?? '').replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
    res.end(
      `<!doctype html><html lang="en"><head><title>The shop</title></head><body><h1>The shop</h1><p id="origin-uri">${uri}</p></body></html>`,
    );
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as net.AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    close: () => new Promise((r) => server.close(() => r())),
  };
}

export async function freePort(): Promise<number> {
  const s = net.createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const { port } = s.address() as net.AddressInfo;
  await new Promise((r) => s.close(r));
  return port;
}

/** The admin token of every anteroom {@link startAnteroom} starts. */
export const ADMIN_TOKEN = 'browser-test-admin-token-0123456789';

export interface Anteroom {
  port: number;
  /** The room whose line moves (1 per second), on 127.0.0.1; its origin in-flight cap is 8
   * and its queue breaker 10,000. */
  moving: string;
  /** The room whose line stands still (one admitted, then 0.01 per second), on localhost. */
  still: string;
  logs: string[];
  stop(): Promise<void>;
}

export function binaryPath(): string {
  return process.env.ANTEROOM_BIN ?? path.join(REPO_DIR, 'target', 'debug', 'anteroom');
}

export async function startAnteroom(origin: string): Promise<Anteroom> {
  const { port, logs, stop } = await spawnAnteroom(
    (dir, port) => `listen: "127.0.0.1:${port}"
admit_interval: 100ms
cookie_secret: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
admin_token: "${ADMIN_TOKEN}"
data_dir: "${path.join(dir, 'data')}"
rooms:
  still:
    match_host: localhost
    origin: ${origin}
    rate: 0.01
    max_active: 1000
    title: "Sneaker drop"
    message: "Thanks for waiting. Everyone in line gets the same chance."
  moving:
    origin: ${origin}
    rate: 1
    max_active: 1000
    max_inflight: 8
    max_waiting: 10000
`,
  );
  return { port, moving: `http://127.0.0.1:${port}`, still: `http://localhost:${port}`, logs, stop };
}

export interface SpawnedAnteroom {
  /** The public listener's port, on 127.0.0.1. */
  port: number;
  /** Its temporary directory (the config's `dir`), removed when it stops. */
  dir: string;
  logs: string[];
  stop(): Promise<void>;
}

/** Starts the anteroom binary with the config `configFor` writes, given a fresh temporary
 * directory (for `data_dir`) and a free port for the public listener on 127.0.0.1, and
 * waits until it answers its health check. */
export async function spawnAnteroom(configFor: (dir: string, port: number) => string): Promise<SpawnedAnteroom> {
  const bin = binaryPath();
  if (!existsSync(bin)) throw new Error(`no anteroom binary at ${bin}: run cargo build first`);
  const dir = mkdtempSync(path.join(os.tmpdir(), 'anteroom-browser-'));
  const port = await freePort();
  const config = path.join(dir, 'anteroom.yaml');
  writeFileSync(config, configFor(dir, port));
  const logs: string[] = [];
  const child: ChildProcess = spawn(bin, ['--config', config], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, ANTEROOM_LOG: 'warn' },
  });
  child.stdout?.on('data', (d) => logs.push(String(d)));
  child.stderr?.on('data', (d) => logs.push(String(d)));
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGTERM');
      await new Promise((r) => child.once('exit', r));
    }
    rmSync(dir, { recursive: true, force: true });
  };
  const base = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 20_000;
  for (;;) {
    if (child.exitCode !== null) {
      rmSync(dir, { recursive: true, force: true });
      throw new Error(`anteroom exited: ${logs.join('')}`);
    }
    try {
      const r = await fetch(`${base}/__anteroom/healthz`);
      if (r.ok) break;
    } catch {
      /* not up yet */
    }
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`anteroom did not start: ${logs.join('')}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return { port, dir, logs, stop };
}

/** A GET as a new visitor (no cookie) with the given Host; returns status and body. */
export function visit(
  port: number,
  host: string,
  pathAndQuery = '/',
  headers: Record<string, string> = {},
): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: Buffer }> {
  return new Promise((resolve, reject) => {
    const req = http.get(
      { host: '127.0.0.1', port, path: pathAndQuery, headers: { host: `${host}:${port}`, ...headers } },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () =>
          resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }),
        );
      },
    );
    req.on('error', reject);
  });
}

/** axe-core's serious and critical violations on the page as it is now. */
export async function axeViolations(page: Page): Promise<string[]> {
  const axe = readFileSync(path.join(WEB_DIR, 'node_modules', 'axe-core', 'axe.min.js'), 'utf8');
  // Evaluated through the DevTools protocol, so a page with a strict CSP (the control
  // room) is checked as served.
  await page.evaluate(axe);
  const result = await page.evaluate(async () => {
    const w = window as unknown as {
      axe: {
        run: (ctx: Document) => Promise<{ violations: { id: string; impact: string; help: string; nodes: { target: unknown }[] }[] }>;
      };
    };
    return w.axe.run(document);
  });
  return result.violations
    .filter((v) => v.impact === 'serious' || v.impact === 'critical')
    .map((v) => `${v.id} (${v.impact}): ${v.help} ×${v.nodes.length} ${JSON.stringify(v.nodes.map((n) => n.target))}`);
}

export interface Redis {
  url: string;
  stop(): Promise<void>;
}

/** A real `redis-server` on a free loopback port, nothing saved to disk. */
export async function startRedis(): Promise<Redis> {
  const port = await freePort();
  const child = spawn(
    process.env.REDIS_SERVER ?? 'redis-server',
    ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
    { stdio: 'ignore' },
  );
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGKILL');
      await new Promise((r) => child.once('exit', r));
    }
  };
  const deadline = Date.now() + 10_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`redis-server exited: ${child.exitCode} (apt-get install redis-server)`);
    const pong = await new Promise<boolean>((resolve) => {
      const s = net.connect(port, '127.0.0.1', () => s.write('PING\r\n'));
      s.on('data', (d) => {
        resolve(String(d).startsWith('+PONG'));
        s.destroy();
      });
      s.on('error', () => resolve(false));
    });
    if (pong) break;
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`redis-server on port ${port} did not answer`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  return { url: `redis://127.0.0.1:${port}/0`, stop };
}

/** The address nginx connects to the replicas from: a loopback address of its own, so the
 * replicas' `trusted_proxies` names nginx alone and a visitor (on 127.0.0.1) is known by
 * the address nginx forwards for them. */
export const NGINX_PEER = '127.0.0.3';

export interface LoggedRequest {
  method: string;
  uri: string;
  status: number;
  /** The `x-replica` header the request carried, `-` without. */
  steer: string;
  /** The replica nginx sent it to (a port), as nginx logged `$upstream_addr`. */
  upstream: string;
}

export interface Nginx {
  port: number;
  /** The requests nginx has logged so far (each is logged once answered). */
  log(): LoggedRequest[];
  stop(): Promise<void>;
}

/** Debian's nginx in front of replicas (name → port), on 127.0.0.1 with a generated config
 * and a temporary prefix: the server block docs/operations.md gives (`X-Forwarded-For`,
 * keep-alive upstreams, the live stream unbuffered), round robin over the replicas. A
 * request with an `x-replica` header naming a replica goes to that one (what a test uses
 * to send a challenge's answer to another replica than issued it); the header goes no
 * further. The access log records each request's upstream. */
export async function startNginx(replicas: Record<string, number>): Promise<Nginx> {
  const bin = ['/usr/sbin/nginx', '/usr/bin/nginx'].find((p) => existsSync(p));
  if (!bin) throw new Error("nginx is missing: scripts/test-tools.sh installs Debian's nginx");
  const dir = mkdtempSync(path.join(os.tmpdir(), 'anteroom-nginx-'));
  const port = await freePort();
  const server = (p: number) => `server 127.0.0.1:${p};`;
  const ports = [...new Set(Object.values(replicas))];
  const names = Object.entries(replicas);
  const conf = `daemon off;
user root;
worker_processes 1;
pid ${dir}/nginx.pid;
error_log ${dir}/error.log warn;
events { worker_connections 1024; }
http {
  client_body_temp_path ${dir}/body;
  proxy_temp_path ${dir}/proxy;
  fastcgi_temp_path ${dir}/fastcgi;
  uwsgi_temp_path ${dir}/uwsgi;
  scgi_temp_path ${dir}/scgi;
  log_format replicas '$request_method $request_uri $status $http_x_replica $upstream_addr';
  access_log ${dir}/access.log replicas;
  upstream replicas { ${ports.map(server).join(' ')} keepalive 16; keepalive_timeout 50s; }
${names.map(([name, p]) => `  upstream replica_${name} { ${server(p)} keepalive 4; }`).join('\n')}
  map $http_x_replica $replicas {
    default replicas;
${names.map(([name]) => `    ${name} replica_${name};`).join('\n')}
  }
  map $http_upgrade $connection_upgrade { default upgrade; '' ''; }
  server {
    listen 127.0.0.1:${port};
    proxy_http_version 1.1;
    proxy_bind ${NGINX_PEER};
    # $http_host, not $host: the port stays in it (behind 443 the two are the same).
    proxy_set_header Host              $http_host;
    proxy_set_header X-Forwarded-For   $proxy_add_x_forwarded_for;
    proxy_set_header X-Forwarded-Proto $scheme;
    proxy_set_header Upgrade           $http_upgrade;
    proxy_set_header Connection        $connection_upgrade;
    proxy_set_header X-Replica         "";
    proxy_read_timeout 60s;
    location / { proxy_pass http://$replicas; }
    location = /__anteroom/events {
      proxy_pass http://$replicas;
      proxy_buffering off;
      proxy_read_timeout 1h;
    }
  }
}
`;
  writeFileSync(path.join(dir, 'nginx.conf'), conf);
  const output: string[] = [];
  const child = spawn(bin, ['-p', dir, '-e', path.join(dir, 'error.log'), '-c', path.join(dir, 'nginx.conf')], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  child.stdout?.on('data', (d) => output.push(String(d)));
  child.stderr?.on('data', (d) => output.push(String(d)));
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      // SIGQUIT: nginx's graceful stop; the master waits for its worker.
      child.kill('SIGQUIT');
      const exited = new Promise((r) => child.once('exit', r));
      const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
      await exited;
      clearTimeout(timer);
    }
    rmSync(dir, { recursive: true, force: true });
  };
  const deadline = Date.now() + 10_000;
  for (;;) {
    const errors = () => `${output.join('')}${existsSync(path.join(dir, 'error.log')) ? readFileSync(path.join(dir, 'error.log'), 'utf8') : ''}`;
    if (child.exitCode !== null) {
      const why = errors();
      rmSync(dir, { recursive: true, force: true });
      throw new Error(`nginx exited: ${why}`);
    }
    const up = await new Promise<boolean>((resolve) => {
      const s = net.connect(port, '127.0.0.1', () => {
        s.destroy();
        resolve(true);
      });
      s.on('error', () => resolve(false));
    });
    if (up) break;
    if (Date.now() > deadline) {
      const why = errors();
      await stop();
      throw new Error(`nginx did not start on port ${port}: ${why}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  const log = (): LoggedRequest[] => {
    const file = path.join(dir, 'access.log');
    if (!existsSync(file)) return [];
    return readFileSync(file, 'utf8')
      .split('\n')
      .filter((l) => l)
      .map((l) => {
        const [method, uri, status, steer, ...upstream] = l.split(' ');
        return { method, uri, status: Number(status), steer, upstream: upstream.join(' ') };
      });
  };
  return { port, log, stop };
}
