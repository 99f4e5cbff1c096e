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
  return { port, logs, stop };
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

export interface Balancer {
  port: number;
  /** How many requests each replica got. */
  counts: Record<string, number>;
  close(): Promise<void>;
}

/** A load balancer in front of replicas (name → port) on 127.0.0.1: a request goes to the
 * replica its `x-replica` header names, else to the first; the Host and everything else
 * pass as they are, so the replicas see one site, as behind a real balancer. */
export async function startBalancer(replicas: Record<string, number>): Promise<Balancer> {
  const names = Object.keys(replicas);
  const counts: Record<string, number> = Object.fromEntries(names.map((n) => [n, 0]));
  const server = http.createServer((req, res) => {
    const wanted = String(req.headers['x-replica'] ?? '');
    const name = wanted in replicas ? wanted : names[0];
    counts[name]++;
    const upstream = http.request(
      { host: '127.0.0.1', port: replicas[name], method: req.method, path: req.url, headers: req.headers },
      (up) => {
        res.writeHead(up.statusCode ?? 502, up.rawHeaders);
        up.pipe(res);
      },
    );
    upstream.on('error', () => {
      if (!res.headersSent) res.writeHead(502);
      res.end();
    });
    req.pipe(upstream);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as net.AddressInfo;
  return {
    port,
    counts,
    close: () =>
      new Promise((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}
